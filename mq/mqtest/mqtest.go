package mqtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/courier-oss/courier/mq"
)

// Received is one message as the broker durably holds it, read back by a Harness.
type Received struct {
	// ID is the message id where the broker itself carries one: the Nats-Msg-Id header on NATS,
	// the message_id property on AMQP. Kafka has no such field: its harness reports the
	// Courier-Message-Id header.
	ID string
	// Key is the key where the broker itself carries one (the Kafka record key); elsewhere the
	// Courier-Key header.
	Key string
	// Payload is the message body.
	Payload []byte
	// Headers holds every header stored with the message, courier's own included.
	Headers map[string]string
}

// Harness connects the suite to one broker. Every field is required.
type Harness struct {
	// NewPublisher returns a new publisher for the broker that reaches it through whatever Cut
	// cuts. The suite closes it.
	NewPublisher func(t *testing.T) mq.Publisher
	// CreateTopic makes topic a durable destination (a stream capturing the subject, a Kafka
	// topic, a durable queue bound to the exchange).
	CreateTopic func(t *testing.T, topic string)
	// Read returns every message the broker durably holds for topic, read with a client of its
	// own, in the broker's order (per partition on Kafka).
	Read func(t *testing.T, topic string) []Received
	// Cut makes the broker unreachable for publishers from NewPublisher: their connections drop
	// and reconnecting fails. Restore brings it back with everything it had acknowledged.
	Cut     func(t *testing.T)
	Restore func(t *testing.T)
	// LeakOptions are extra goleak options for the close case, for goroutines the broker side
	// starts on its own.
	LeakOptions []goleak.Option
}

// Timeouts of the suite: generous bounds for slow machines, never speed assertions.
const (
	opTimeout      = 30 * time.Second // one publish or read that must succeed
	cutTimeout     = 3 * time.Second  // a publish or ping while the broker is unreachable
	recoverTimeout = 60 * time.Second // until publishing works again after Restore
)

// Run runs the publisher conformance suite against the broker h connects to. The cases run one
// after another (one of them cuts the broker, another counts goroutines), so the test calling
// Run must not run in parallel with other tests of its package.
func Run(t *testing.T, h Harness) {
	require.NotNil(t, h.NewPublisher, "Harness.NewPublisher")
	require.NotNil(t, h.CreateTopic, "Harness.CreateTopic")
	require.NotNil(t, h.Read, "Harness.Read")
	require.NotNil(t, h.Cut, "Harness.Cut")
	require.NotNil(t, h.Restore, "Harness.Restore")
	for _, c := range []struct {
		name string
		run  func(*testing.T, Harness)
	}{
		{"AckedIsDurable", ackedIsDurable},
		{"KeyOrder", keyOrder},
		{"HeadersKeyAndID", headersKeyAndID},
		{"UnknownTopicIsPermanent", unknownTopic},
		{"RefusedNeverLeaves", refused},
		{"ConcurrentPublishes", concurrent},
		{"BatchPublishReportsEachMessage", batch},
		{"UnreachableIsRetryableAndRecovers", unreachable},
		{"CloseIsClean", closeIsClean},
	} {
		if !t.Run(c.name, func(t *testing.T) { c.run(t, h) }) && c.name == "UnreachableIsRetryableAndRecovers" {
			// The broker may still be cut: the cases after this one would only fail for that.
			h.Restore(t)
		}
	}
}

// Topic returns a fresh topic name for case, valid for every broker.
func Topic(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "conformance." + name + "." + hex.EncodeToString(b[:])
}

func newPublisher(t *testing.T, h Harness) mq.Publisher {
	t.Helper()
	pub := h.NewPublisher(t)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

func publish(t *testing.T, pub mq.Publisher, m mq.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	require.NoError(t, pub.Publish(ctx, m), "publish %s to %s", m.ID, m.Topic)
}

func ids(rs []Received) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

// What Publish acknowledged is held by the broker, read back by another client.
func ackedIsDurable(t *testing.T, h Harness) {
	pub := newPublisher(t, h)
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	require.NoError(t, pub.Ping(ctx), "a reachable broker pings")

	topic := Topic("acked")
	h.CreateTopic(t, topic)
	var want []string
	for i := range 5 {
		m := mq.Message{ID: fmt.Sprintf("acked-%d", i), Topic: topic, Key: "k", Payload: fmt.Appendf(nil, `{"n":%d}`, i)}
		publish(t, pub, m)
		want = append(want, m.ID)
	}
	got := h.Read(t, topic)
	require.Equal(t, want, ids(got), "every acknowledged message is held, once, in order")
	for i, r := range got {
		require.Equal(t, fmt.Sprintf(`{"n":%d}`, i), string(r.Payload))
	}
}

// Messages of one key keep their order (one Kafka partition per key).
func keyOrder(t *testing.T, h Harness) {
	pub := newPublisher(t, h)
	topic := Topic("order")
	h.CreateTopic(t, topic)
	keys := []string{"aggregate-1", "aggregate-2", "aggregate-3"}
	want := map[string][]string{}
	for i := range 30 {
		k := keys[i%len(keys)]
		m := mq.Message{ID: fmt.Sprintf("order-%02d", i), Topic: topic, Key: k, Payload: []byte("x")}
		publish(t, pub, m)
		want[k] = append(want[k], m.ID)
	}
	got := map[string][]string{}
	for _, r := range h.Read(t, topic) {
		got[r.Key] = append(got[r.Key], r.ID)
	}
	require.Equal(t, want, got, "per key, messages are held in publish order")
}

// Producer headers, the key and the message id reach the broker unchanged.
func headersKeyAndID(t *testing.T, h Harness) {
	pub := newPublisher(t, h)
	topic := Topic("headers")
	h.CreateTopic(t, topic)
	headers := map[string]string{
		"traceparent":  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"Tenant-Id":    "tenant 7",
		"x-Mixed-cAse": "ünïcode ✓",
	}
	payload := []byte{0x00, 0xff, 0x7b, 0x0a, 0x22}
	publish(t, pub, mq.Message{ID: "hdr-1", Topic: topic, Key: "order-7", Payload: payload, Headers: headers})
	publish(t, pub, mq.Message{ID: "hdr-2", Topic: topic, Payload: []byte("no key, no headers")})

	got := h.Read(t, topic)
	require.Len(t, got, 2)
	first, second := got[0], got[1]
	if first.ID != "hdr-1" { // two partitions on Kafka: either may come first
		first, second = second, first
	}
	require.Equal(t, "hdr-1", first.ID, "message id")
	require.Equal(t, "order-7", first.Key, "key")
	require.Equal(t, payload, first.Payload, "payload bytes")
	require.Equal(t, "hdr-1", first.Headers[mq.HeaderMessageID], "the %s header", mq.HeaderMessageID)
	require.Equal(t, "order-7", first.Headers[mq.HeaderKey], "the %s header", mq.HeaderKey)
	for k, v := range headers {
		require.Equal(t, v, first.Headers[k], "producer header %q keeps its name and value", k)
	}

	require.Equal(t, "hdr-2", second.ID)
	require.Empty(t, second.Key, "no key")
	require.Equal(t, "hdr-2", second.Headers[mq.HeaderMessageID])
	require.NotContains(t, second.Headers, mq.HeaderKey, "no key header without a key")
	for k := range headers {
		require.NotContains(t, second.Headers, k, "headers do not leak between messages")
	}
}

// A topic with no destination is ErrUnknownTopic and writes nothing; it is not remembered once
// the destination exists.
func unknownTopic(t *testing.T, h Harness) {
	pub := newPublisher(t, h)
	topic := Topic("unknown")
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	err := pub.Publish(ctx, mq.Message{ID: "unknown-1", Topic: topic, Key: "k", Payload: []byte("x")})
	require.ErrorIs(t, err, mq.ErrUnknownTopic, "no destination is permanent")
	require.NotErrorIs(t, err, mq.ErrRefused)

	h.CreateTopic(t, topic)
	publish(t, pub, mq.Message{ID: "unknown-2", Topic: topic, Key: "k", Payload: []byte("y")})
	require.Equal(t, []string{"unknown-2"}, ids(h.Read(t, topic)), "the refused publish wrote nothing")
}

// Messages that break courier's message rule are ErrRefused and never reach the broker.
func refused(t *testing.T, h Harness) {
	pub := newPublisher(t, h)
	topic := Topic("refused")
	h.CreateTopic(t, topic)
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	for _, m := range []mq.Message{
		{ID: "r1", Topic: "$JS.API.STREAM.PURGE.X", Payload: []byte("{}")},
		{ID: "r2", Topic: "_INBOX.x", Payload: []byte("{}")},
		{ID: "r3", Topic: "conformance..double-dot", Payload: []byte("x")},
		{ID: "r4", Topic: topic, Payload: []byte("x"), Headers: map[string]string{"Nats-Rollup": "all"}},
		{ID: "r5", Topic: topic, Payload: []byte("x"), Headers: map[string]string{"courier-message-id": "forged"}},
		{ID: "r6", Topic: topic, Key: "bad\x00key", Payload: []byte("x")},
		{ID: "r7", Topic: topic, Payload: []byte("x"), Headers: map[string]string{"Bad Name": "v"}},
	} {
		err := pub.Publish(ctx, m)
		require.ErrorIs(t, err, mq.ErrRefused, "%s: topic %q key %q headers %v", m.ID, m.Topic, m.Key, m.Headers)
		require.NotErrorIs(t, err, mq.ErrUnknownTopic, m.ID)
	}
	require.Empty(t, h.Read(t, topic), "nothing refused reached the broker")
}

// A batch through mq.PublishAll (the adapter's PublishBatch where it has one) reports each
// message on its own: the good ones are held once each, with their ids, even when others in the
// same batch are refused or have no destination; publishing the batch again (a retried batch
// activity) stores no duplicate where the broker deduplicates by message id.
func batch(t *testing.T, h Harness) {
	pub := newPublisher(t, h)
	topic, missing := Topic("batch"), Topic("batch-missing")
	h.CreateTopic(t, topic)
	var msgs []mq.Message
	var want []string
	for i := range 200 {
		m := mq.Message{ID: fmt.Sprintf("batch-%03d", i), Topic: topic, Key: "k", Payload: fmt.Appendf(nil, `{"n":%d}`, i)}
		switch i {
		case 10:
			m.Topic = "$JS.API.STREAM.PURGE.X"
		case 20:
			m.Topic = missing
		default:
			want = append(want, m.ID)
		}
		msgs = append(msgs, m)
	}
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	errs := mq.PublishAll(ctx, pub, msgs)
	require.Len(t, errs, len(msgs))
	for i, err := range errs {
		switch i {
		case 10:
			require.ErrorIs(t, err, mq.ErrRefused, "the control subject is refused")
		case 20:
			require.ErrorIs(t, err, mq.ErrUnknownTopic, "the topic without a destination")
		default:
			require.NoError(t, err, msgs[i].ID)
		}
	}
	require.ElementsMatch(t, want, ids(h.Read(t, topic)), "every good message is held once, whatever the others did")
}

// Publishes from many goroutines are all acknowledged and all held, each once, and each
// goroutine's messages keep their order.
func concurrent(t *testing.T, h Harness) {
	const goroutines, each = 20, 10
	pub := newPublisher(t, h)
	topic := Topic("concurrent")
	h.CreateTopic(t, topic)
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	errs := make(chan error, goroutines*each)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				m := mq.Message{ID: fmt.Sprintf("c-%02d-%02d", g, i), Topic: topic, Key: fmt.Sprintf("k-%02d", g), Payload: []byte("x")}
				if err := pub.Publish(ctx, m); err != nil {
					errs <- fmt.Errorf("%s: %w", m.ID, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	got := h.Read(t, topic)
	require.Len(t, got, goroutines*each, "every acknowledged message is held, none twice")
	perKey := map[string][]string{}
	for _, r := range got {
		perKey[r.Key] = append(perKey[r.Key], r.ID)
	}
	require.Len(t, perKey, goroutines)
	for g := range goroutines {
		var want []string
		for i := range each {
			want = append(want, fmt.Sprintf("c-%02d-%02d", g, i))
		}
		require.Equal(t, want, perKey[fmt.Sprintf("k-%02d", g)], "one goroutine's messages keep their order")
	}
}

// An unreachable broker is a retryable error (neither unknown topic nor refused); publishing
// works again once it is back, and what was acknowledged before is still held.
func unreachable(t *testing.T, h Harness) {
	pub := newPublisher(t, h)
	topic := Topic("unreachable")
	h.CreateTopic(t, topic)
	publish(t, pub, mq.Message{ID: "before", Topic: topic, Key: "k", Payload: []byte("1")})

	h.Cut(t)
	err := bounded(t, pub.Ping)
	require.Error(t, err, "ping fails while the broker is unreachable")
	err = bounded(t, func(ctx context.Context) error {
		return pub.Publish(ctx, mq.Message{ID: "during", Topic: topic, Key: "k", Payload: []byte("2")})
	})
	require.Error(t, err, "nothing is acknowledged while the broker is unreachable")
	require.NotErrorIs(t, err, mq.ErrUnknownTopic, "an unreachable broker is retried, not dead")
	require.NotErrorIs(t, err, mq.ErrRefused)

	h.Restore(t)
	require.NoError(t, retry(t, func(ctx context.Context) error {
		err := pub.Publish(ctx, mq.Message{ID: "after", Topic: topic, Key: "k", Payload: []byte("3")})
		if errors.Is(err, mq.ErrUnknownTopic) || errors.Is(err, mq.ErrRefused) {
			t.Fatalf("while the broker comes back: %v", err)
		}
		return err
	}), "publishing recovers once the broker is back")
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	require.NoError(t, pub.Ping(ctx), "ping recovers")

	// The publish that failed may still have landed (at least once); duplicates of the retried
	// one too. What was acknowledged is there.
	seen := map[string]bool{}
	for _, r := range h.Read(t, topic) {
		seen[r.ID] = true
	}
	require.True(t, seen["before"], "acknowledged before the broker went away")
	require.True(t, seen["after"], "acknowledged after it came back")
}

// bounded calls f with a context that ends after cutTimeout and fails the test if f does not
// return soon after: an adapter that ignores its context would hang the caller's worker.
func bounded(t *testing.T, f func(context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), cutTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(cutTimeout + 10*time.Second):
		t.Fatalf("still running %s after its context ended: the adapter ignores its context", cutTimeout+10*time.Second)
		return nil
	}
}

// retry calls f, each time with its own timeout, until it succeeds or recoverTimeout passes; it
// returns the last error.
func retry(t *testing.T, f func(context.Context) error) error {
	t.Helper()
	deadline := time.Now().Add(recoverTimeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err := f(ctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-t.Context().Done():
			return err
		case <-tick.C:
		}
	}
}

// Close releases everything the publisher started; a publish after Close fails.
func closeIsClean(t *testing.T, h Harness) {
	topic := Topic("close")
	h.CreateTopic(t, topic)
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	opts := append([]goleak.Option{goleak.IgnoreCurrent()}, h.LeakOptions...)

	pub := h.NewPublisher(t)
	require.NoError(t, pub.Publish(ctx, mq.Message{ID: "close-1", Topic: topic, Payload: []byte("x")}))
	require.NoError(t, pub.Ping(ctx))
	require.NoError(t, pub.Close(), "close")
	_ = pub.Close() // a second Close may report that it is closed, but must not panic or hang

	err := pub.Publish(ctx, mq.Message{ID: "close-2", Topic: topic, Payload: []byte("x")})
	require.Error(t, err, "a closed publisher acknowledges nothing")
	require.False(t, errors.Is(err, mq.ErrUnknownTopic) || errors.Is(err, mq.ErrRefused), "closed is not a verdict on the message: %v", err)
	// goleak.Find waits up to about 2 s; the broker side may take longer to see the hang-up.
	err = goleak.Find(opts...)
	for i := 0; err != nil && i < 5; i++ {
		err = goleak.Find(opts...)
	}
	require.NoError(t, err, "no goroutine outlives Close")
	require.Equal(t, []string{"close-1"}, ids(h.Read(t, topic)))
}
