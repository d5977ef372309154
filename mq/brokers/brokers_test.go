package brokers_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/devstack/embeddednats"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/mq/brokers"
	"github.com/courier-oss/courier/mq/kafkamq"
	"github.com/courier-oss/courier/mq/rabbitmq"
)

// brokers.Dial picks the adapter by scheme; brokers.CheckURL validates without connecting.
func TestDialAndCheckURL(t *testing.T) {
	for _, u := range []string{
		"nats://127.0.0.1:4222",
		"nats://a:4222,nats://b:4222",
		"kafka://127.0.0.1:9092",
		"amqp://guest:guest@127.0.0.1:5672/",
		"amqps://u:p@h/?exchange=x",
	} {
		require.NoError(t, brokers.CheckURL(u), u)
	}
	for _, u := range []string{"", "redis://h", "h:4222", "nats://", "kafka://a?x=1", "amqp://h?x=1"} {
		require.Error(t, brokers.CheckURL(u), u)
		_, err := brokers.Dial(u)
		require.Error(t, err, u)
	}
	require.Equal(t, "amqps", mq.Scheme("AMQPS://h"))

	// Kafka and RabbitMQ connect lazily: a broker that is not there yet is no Dial error.
	for _, u := range []string{"kafka://127.0.0.1:1", "amqp://guest:guest@127.0.0.1:1/"} {
		p, err := brokers.Dial(u)
		require.NoError(t, err, u)
		require.NoError(t, p.Close())
	}
	p, err := brokers.Dial("kafka://127.0.0.1:1")
	require.NoError(t, err)
	require.IsType(t, &kafkamq.Publisher{}, p)
	require.NoError(t, p.Close())
	p, err = brokers.Dial("amqp://127.0.0.1:1")
	require.NoError(t, err)
	require.IsType(t, &rabbitmq.Publisher{}, p)
	require.NoError(t, p.Close())
}

// brokers.Dial does not fail on a NATS server that is not there yet; publishing works once it is.
func TestDialNATSLazily(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	pub, err := brokers.Dial(fmt.Sprintf("nats://127.0.0.1:%d", port))
	require.NoError(t, err)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	require.Error(t, pub.Ping(ctx))

	srv, err := embeddednats.Start(embeddednats.Config{Port: port, StoreDir: t.TempDir()})
	require.NoError(t, err)
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "LAZY", Subjects: []string{"lazy.>"}})
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		err = pub.Publish(ctx, mq.Message{ID: "1", Topic: "lazy.created", Payload: []byte("x")})
		cancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	require.NoError(t, err, "publishing works once the server answers")
}
