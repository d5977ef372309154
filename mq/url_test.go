package mq

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
)

// Kafka URLs: a list of brokers with a default port, TLS and SASL options, secrets in the user
// info or the query, and refusals that name the problem without showing the password.
func TestParseKafkaURL(t *testing.T) {
	cfg, err := parseKafkaURL("kafka://a:9093,b,[::1]:9094")
	require.NoError(t, err)
	require.Equal(t, []string{"a:9093", "b:9092", "[::1]:9094"}, cfg.brokers)
	require.Nil(t, cfg.tls)
	require.Nil(t, cfg.sasl)
	require.False(t, cfg.autoCreate)

	cfg, err = parseKafkaURL("KAFKA://u:p%40ss@h:1/?tls=1&sasl=scram-sha-256&auto_create=true")
	require.NoError(t, err)
	require.Equal(t, []string{"h:1"}, cfg.brokers)
	require.NotNil(t, cfg.tls)
	require.Equal(t, "SCRAM-SHA-256", cfg.sasl.Name())
	require.True(t, cfg.autoCreate)

	cfg, err = parseKafkaURL("kafka://h?sasl=PLAIN&user=u&password=p&tls_server_name=kafka.internal")
	require.NoError(t, err)
	require.Equal(t, "PLAIN", cfg.sasl.Name())
	require.Equal(t, "kafka.internal", cfg.tls.ServerName, "tls_server_name implies TLS")

	cfg, err = parseKafkaURL("kafka://h?sasl=scram-sha-512&user=u&password=p")
	require.NoError(t, err)
	require.Equal(t, "SCRAM-SHA-512", cfg.sasl.Name())

	for _, c := range []struct{ url, want string }{
		{"nats://h:4222", "want kafka://"},
		{"kafka://", "empty broker address"},
		{"kafka://a,,b", "empty broker address"},
		{"kafka://a:port", "not host:port"},
		{"kafka://a:70000", "not host:port"},
		{"kafka://a/topic", "path"},
		{"kafka://a?acks=1", `unknown option "acks"`},
		{"kafka://a?tls=maybe", "not a boolean"},
		{"kafka://a?sasl=gssapi&user=u", "want plain, scram-sha-256 or scram-sha-512"},
		{"kafka://a?sasl=plain", "needs a user"},
		{"kafka://u:secret@a", "needs sasl="},
		{"kafka://a?tls_cert=/x.pem", "go together"},
		{"kafka://a?tls_ca=/does/not/exist.pem", "tls_ca"},
	} {
		_, err := parseKafkaURL(c.url)
		require.ErrorContains(t, err, c.want, c.url)
		require.NotContains(t, err.Error(), "secret", "errors never show the password")
	}
}

// RabbitMQ URLs: courier's exchange and declare options, amqp091's own passed through,
// anything else refused.
func TestParseRabbitMQURL(t *testing.T) {
	cfg, err := parseRabbitMQURL("amqp://guest:guest@127.0.0.1:5672/")
	require.NoError(t, err)
	require.Equal(t, DefaultRabbitMQExchange, cfg.exchange)
	require.True(t, cfg.declare)
	require.Equal(t, "amqp://guest:xxxxx@127.0.0.1:5672/", cfg.addr)

	cfg, err = parseRabbitMQURL("amqps://u:p@mq.example/prod?exchange=events&declare=0&heartbeat=5&cacertfile=/ca.pem")
	require.NoError(t, err)
	require.Equal(t, "events", cfg.exchange)
	require.False(t, cfg.declare)
	require.Equal(t, "amqps://u:p@mq.example/prod?cacertfile=%2Fca.pem&heartbeat=5", cfg.url, "courier's options are not passed on")

	cfg, err = parseRabbitMQURL("amqp://h/?exchange=")
	require.NoError(t, err)
	require.Empty(t, cfg.exchange, "the default exchange")

	for _, c := range []struct{ url, want string }{
		{"kafka://h", "want amqp:// or amqps://"},
		{"amqp://h?mandatory=0", `unknown option "mandatory"`},
		{"amqp://h?declare=perhaps", "not a boolean"},
		{"amqp://h?heartbeat=x", "heartbeat"},
	} {
		_, err := parseRabbitMQURL(c.url)
		require.ErrorContains(t, err, c.want, c.url)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://guest:guest@h:5672/vh":                       "amqp://guest:xxxxx@h:5672/vh",
		"amqp://guest@h":                                     "amqp://guest@h",
		"kafka://u:p@a:1,b:2?sasl=plain":                     "kafka://u:xxxxx@a:1,b:2?sasl=plain",
		"kafka://a:1,b:2?sasl=plain&user=u&password=s3cr%3D": "kafka://a:1,b:2?sasl=plain&user=u&password=xxxxx",
		"nats://u:p@a:4222,nats://v:q@b:4222":                "nats://u:xxxxx@a:4222,nats://v:xxxxx@b:4222",
		"nats://h:4222":                                      "nats://h:4222",
		"h:4222":                                             "<broker URL without scheme>",
	} {
		require.Equal(t, want, RedactURL(in), in)
	}
}

// Dial picks the adapter by scheme; CheckURL validates without connecting.
func TestDialAndCheckURL(t *testing.T) {
	for _, u := range []string{
		"nats://127.0.0.1:4222",
		"nats://a:4222,nats://b:4222",
		"kafka://127.0.0.1:9092",
		"amqp://guest:guest@127.0.0.1:5672/",
		"amqps://u:p@h/?exchange=x",
	} {
		require.NoError(t, CheckURL(u), u)
	}
	for _, u := range []string{"", "redis://h", "h:4222", "nats://", "kafka://a?x=1", "amqp://h?x=1"} {
		require.Error(t, CheckURL(u), u)
		_, err := Dial(u)
		require.Error(t, err, u)
	}
	require.Equal(t, "amqps", Scheme("AMQPS://h"))

	// Kafka and RabbitMQ connect lazily: a broker that is not there yet is no Dial error.
	for _, u := range []string{"kafka://127.0.0.1:1", "amqp://guest:guest@127.0.0.1:1/"} {
		p, err := Dial(u)
		require.NoError(t, err, u)
		require.NoError(t, p.Close())
	}
	p, err := Dial("kafka://127.0.0.1:1")
	require.NoError(t, err)
	require.IsType(t, &Kafka{}, p)
	require.NoError(t, p.Close())
	p, err = Dial("amqp://127.0.0.1:1")
	require.NoError(t, err)
	require.IsType(t, &RabbitMQ{}, p)
	require.NoError(t, p.Close())
}

// Dial does not fail on a NATS server that is not there yet; publishing works once it is.
func TestDialNATSLazily(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	pub, err := Dial(fmt.Sprintf("nats://127.0.0.1:%d", port))
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
		err = pub.Publish(ctx, Message{ID: "1", Topic: "lazy.created", Payload: []byte("x")})
		cancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	require.NoError(t, err, "publishing works once the server answers")
}
