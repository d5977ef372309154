package natsmq_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/devstack/embeddednats"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/mq/mqtest"
	"github.com/courier-oss/courier/mq/natsmq"
)

// The publisher contract, against a real NATS JetStream server: acknowledged publishes land in
// the stream with courier's headers, the same message id is stored once, and a subject no stream
// captures is ErrUnknownTopic.
func TestNATSPublisher(t *testing.T) {
	srv, err := embeddednats.Start(embeddednats.Config{Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	defer srv.Shutdown()
	pub, err := natsmq.Dial(srv.URL(), "test")
	require.NoError(t, err)
	defer pub.Close()
	ctx := context.Background()
	require.NoError(t, pub.Ping(ctx))

	js, err := jetstream.New(pub.Conn())
	require.NoError(t, err)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	require.NoError(t, err)

	m := mq.Message{ID: "42", Topic: "orders.created", Key: "o-1", Payload: []byte(`{"a":1}`), Headers: map[string]string{"Trace": "t"}}
	require.NoError(t, pub.Publish(ctx, m))
	require.NoError(t, pub.Publish(ctx, m), "a re-publish is acknowledged")
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs, "and stored once")

	got, err := st.GetMsg(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, "42", got.Header.Get(mq.HeaderMessageID))
	require.Equal(t, "o-1", got.Header.Get(mq.HeaderKey))
	require.Equal(t, "t", got.Header.Get("Trace"))
	require.Equal(t, `{"a":1}`, string(got.Data))

	err = pub.Publish(ctx, mq.Message{ID: "43", Topic: "nowhere.created", Payload: []byte("x")})
	require.ErrorIs(t, err, mq.ErrUnknownTopic)

	// Control subjects and broker-behaviour headers never leave the publisher, whatever path a
	// message took: the stream keeps its message.
	for _, m := range []mq.Message{
		{ID: "50", Topic: "$JS.API.STREAM.PURGE.ORDERS", Payload: []byte("{}")},
		{ID: "51", Topic: "$JS.API.STREAM.DELETE.ORDERS", Payload: []byte("{}")},
		{ID: "52", Topic: "_INBOX.x", Payload: []byte("{}")},
		{ID: "53", Topic: "orders.created", Payload: []byte("x"), Headers: map[string]string{"Nats-Rollup": "all"}},
		{ID: "54", Topic: "orders.created", Payload: []byte("x"), Headers: map[string]string{"Nats-Expected-Last-Sequence": "0"}},
	} {
		require.ErrorIs(t, pub.Publish(ctx, m), mq.ErrRefused, "%s %v", m.Topic, m.Headers)
	}
	info, err = st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs, "the stream is neither purged, rolled up nor deleted")

	// With the server gone, a publish fails without claiming the topic is unknown.
	srv.Shutdown()
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err = pub.Publish(tctx, mq.Message{ID: "44", Topic: "orders.created", Payload: []byte("x")})
	require.Error(t, err)
	require.NotErrorIs(t, err, mq.ErrUnknownTopic, "an unavailable broker is retried, not dead")
}

// The publisher conformance suite against a real embedded NATS JetStream server; cutting it is
// a shutdown, restoring it a restart on the same port and store (so the suite also sees that
// what was acknowledged survives the restart).
func TestNATSConformance(t *testing.T) {
	dir := t.TempDir()
	srv, err := embeddednats.Start(embeddednats.Config{Port: -1, StoreDir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Shutdown() })
	url := srv.URL()
	_, portText, err := net.SplitHostPort(strings.TrimPrefix(url, "nats://"))
	require.NoError(t, err)
	port, err := strconv.Atoi(portText)
	require.NoError(t, err)

	admin := func(t *testing.T) jetstream.JetStream {
		nc, err := nats.Connect(url)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		return js
	}
	stream := func(topic string) string { return "T_" + strings.ReplaceAll(topic, ".", "_") }

	mqtest.Run(t, mqtest.Harness{
		NewPublisher: func(t *testing.T) mq.Publisher {
			pub, err := natsmq.Dial(url, "conformance")
			require.NoError(t, err)
			return pub
		},
		CreateTopic: func(t *testing.T, topic string) {
			_, err := admin(t).CreateStream(t.Context(), jetstream.StreamConfig{
				Name: stream(topic), Subjects: []string{topic}, Storage: jetstream.FileStorage,
			})
			require.NoError(t, err)
		},
		Read: func(t *testing.T, topic string) []mqtest.Received {
			st, err := admin(t).Stream(t.Context(), stream(topic))
			require.NoError(t, err)
			info, err := st.Info(t.Context())
			require.NoError(t, err)
			var out []mqtest.Received
			for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
				msg, err := st.GetMsg(t.Context(), seq)
				if errors.Is(err, jetstream.ErrMsgNotFound) {
					continue
				}
				require.NoError(t, err)
				r := mqtest.Received{
					ID:      msg.Header.Get(jetstream.MsgIDHeader),
					Key:     msg.Header.Get(mq.HeaderKey),
					Payload: msg.Data,
					Headers: map[string]string{},
				}
				for k, vs := range msg.Header {
					r.Headers[k] = vs[0]
				}
				out = append(out, r)
			}
			return out
		},
		Cut: func(t *testing.T) { srv.Shutdown() },
		Restore: func(t *testing.T) {
			srv, err = embeddednats.Start(embeddednats.Config{Port: port, StoreDir: dir})
			require.NoError(t, err)
		},
	})
}
