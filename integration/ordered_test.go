package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
	cc "github.com/courier-oss/courier/client"
	"github.com/courier-oss/courier/mq/natsmq"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/worker"
)

// orderedRetry outlasts a broker cut of a few seconds: no key of the stream gives up during it.
var orderedRetry = courier.RetryPolicy{
	InitialInterval: 100 * time.Millisecond,
	BackoffCoef:     2,
	MaxInterval:     500 * time.Millisecond,
	MaxAttempts:     200,
	AttemptTimeout:  3 * time.Second,
}

// orderedRelay is the relay configuration of the ordered tests: keyed records of orders.> and
// nostream.> are ordered.
func orderedRelay() relay.Config {
	return relay.Config{BatchSize: 50, PollInterval: 50 * time.Millisecond, Lease: 2 * time.Second, Retry: orderedRetry,
		Ordered: relay.OrderedConfig{Topics: []string{"orders.>", "nostream.>"}, Max: 20}}
}

// orderedMsg is what the ordered tests publish: the key and the record's place in its key's
// commit order.
type orderedMsg struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// produceOrdered commits keys × per records, one transaction each, from four producers at once
// (each owning a quarter of the keys, so a key's records commit in the order of n, while the
// keys' transactions interleave). It returns when every record is committed.
func (s *stack) produceOrdered(keys, per int) {
	s.t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for p := range 4 {
		wg.Go(func() {
			for n := range per {
				for k := p; k < keys; k += 4 {
					key := fmt.Sprintf("key-%02d", k)
					body, _ := json.Marshal(orderedMsg{Key: key, N: n})
					err := s.store.DB().RunInTx(context.Background(), nil, func(ctx context.Context, tx bun.Tx) error {
						_, err := outbox.Enqueue(ctx, tx, outbox.Message{Topic: "orders." + key, Key: key, Payload: body})
						return err
					})
					if err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(s.t, err)
	}
}

// requireKeyOrder reads the stream in order and checks every key's records arrived in commit
// order, each once: per key the n seen are exactly 0, 1, …, want[key]-1.
func (s *stack) requireKeyOrder(stream string, want map[string]int) {
	s.t.Helper()
	ids, payloads := s.streamIDs(stream)
	for id, n := range ids {
		require.Equal(s.t, 1, n, "message %s reached the stream %d times", id, n)
	}
	got := map[string][]int{}
	for _, p := range payloads {
		var m orderedMsg
		require.NoError(s.t, json.Unmarshal(p, &m))
		got[m.Key] = append(got[m.Key], m.N)
	}
	require.Len(s.t, got, len(want))
	for key, total := range want {
		seq := make([]int, total)
		for i := range seq {
			seq[i] = i
		}
		require.Equal(s.t, seq, got[key], "key %s: the consumer's order is the commit order", key)
	}
}

func (s *stack) sentCount(ctx context.Context, keyPrefix string) int64 {
	n, err := s.store.DB().NewSelect().TableExpr("courier_outbox").
		Where("status = 'sent'").Where(`"key" LIKE ?`, keyPrefix+"%").Count(ctx)
	require.NoError(s.t, err)
	return n
}

// Ordered keys across a broker cut: 20 keys × 50 records committed by concurrent producers
// while the relay runs, the broker cut mid-stream and restored; every key's records reach the
// consumer in commit order, each once. Meanwhile a key whose first record can never be
// published (no stream captures its topic) is blocked, visible in the API with its reason and
// the records waiting behind it, while the other keys all flow; skipped through the API, its
// later records go out in order. On both databases.
func TestOrderedKeysKeepCommitOrder(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) { testOrderedKeys(t, dialect) })
	}
}

func testOrderedKeys(t *testing.T, dialect string) {
	s := newStack(t, dialect)
	ctx := t.Context()
	s.createStream("ORDERS", "orders.>")
	proxy := newProxy(t, s.nats.URL())
	pub, err := natsmq.Dial(proxy.url("nats"), "ordered-test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })

	w, err := worker.New(worker.Config{Relay: orderedRelay(), ShutdownTimeout: 5 * time.Second}, worker.Deps{
		Temporal: s.tc, Sources: []relay.Source{{Name: courier.DefaultSource, Store: s.store}}, Publisher: pub, Logger: quiet,
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)
	url, token := s.gateway(w.Relay().Wake)
	admin, err := cc.New(url, cc.WithAPIKey(token))
	require.NoError(t, err)

	// The poison key: its first record's topic has no stream, its next five wait behind it.
	var poison []int64
	require.NoError(t, s.store.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		msgs := []outbox.Message{{Topic: "nostream.x", Key: "poison", Payload: []byte(`{"key":"poison","n":-1}`)}}
		for n := range 5 {
			body, _ := json.Marshal(orderedMsg{Key: "poison", N: n})
			msgs = append(msgs, outbox.Message{Topic: "orders.poison", Key: "poison", Payload: body})
		}
		poison, err = outbox.Enqueue(ctx, tx, msgs...)
		return err
	}))

	const keys, per = 20, 50
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		s.produceOrdered(keys, per)
	}()

	// Cut the broker once a fifth is through, until some record has failed an attempt.
	require.Eventually(t, func() bool { return s.sentCount(ctx, "key-") >= keys*per/5 }, 2*time.Minute, 20*time.Millisecond)
	proxy.cut()
	require.Eventually(t, func() bool {
		n, err := s.store.DB().NewSelect().TableExpr("courier_outbox").
			Where("attempts > 0").Where("status <> 'sent'").Where(`"key" LIKE 'key-%'`).Count(ctx)
		require.NoError(t, err)
		return n > 0
	}, time.Minute, 20*time.Millisecond, "publishes fail while the broker is cut")
	sentAtCut := s.sentCount(ctx, "key-")
	proxy.restore()
	<-produced

	// The poison key is blocked, with its reason, while every other key's records all go out.
	var blocked *cc.BlockedKeyPage
	require.Eventually(t, func() bool {
		blocked, err = admin.BlockedKeys(ctx, cc.BlockedKeysQuery{})
		require.NoError(t, err)
		return len(blocked.Items) == 1
	}, time.Minute, 20*time.Millisecond)
	b := blocked.Items[0]
	require.Equal(t, "poison", b.Key)
	require.Equal(t, poison[0], b.RecordID)
	require.Equal(t, "nostream.x", b.Topic)
	require.Contains(t, b.Reason, "no JetStream stream captures")
	require.Equal(t, int64(5), b.Waiting)
	require.Equal(t, "outbox-key/poison", b.WorkflowID)
	require.Eventually(t, func() bool { return s.sentCount(ctx, "key-") == keys*per }, 3*time.Minute, 50*time.Millisecond,
		"the other keys flow while one is blocked (%d sent when the broker was cut)", sentAtCut)
	for _, id := range poison[1:] {
		rec, err := s.store.GetOutbox(ctx, id)
		require.NoError(t, err)
		require.Equal(t, courier.OutboxPending, rec.Status, "a blocked key's later records wait")
		require.Zero(t, rec.Attempts)
	}

	// Skipped, the dead record stays dead and the key's later records go out in order.
	_, err = admin.SkipOutbox(ctx, "", poison[1])
	require.ErrorIs(t, err, cc.ErrConflict, "only the record a key waits on can be skipped")
	sk, err := admin.SkipOutbox(ctx, "", poison[0])
	require.NoError(t, err)
	require.Equal(t, "poison", sk.Key)
	require.Eventually(t, func() bool { return s.sentCount(ctx, "poison") == 5 }, time.Minute, 20*time.Millisecond)
	rec, err := s.store.GetOutbox(ctx, poison[0])
	require.NoError(t, err)
	require.Equal(t, courier.OutboxDead, rec.Status)
	left, err := admin.BlockedKeys(ctx, cc.BlockedKeysQuery{})
	require.NoError(t, err)
	require.Empty(t, left.Items)

	want := map[string]int{"poison": 5}
	for k := range keys {
		want[fmt.Sprintf("key-%02d", k)] = per
	}
	s.requireKeyOrder("ORDERS", want)
}

// Ordered keys across a SIGKILL: a worker process delivering 20 keys × 50 records is killed
// mid-stream; a new worker finishes, and every key's records reach the consumer in commit
// order, each once (a record published again after the kill is dropped by JetStream's
// duplicate window).
func TestOrderedKeysSurviveAKill(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			s := newStack(t, dialect)
			ctx := t.Context()
			s.createStream("ORDERS", "orders.>")
			const keys, per = 20, 50
			s.produceOrdered(keys, per)

			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), workerRoleEnv+"=1", workerOrderedEnv+"=1",
				"COURIER_IT_TEMPORAL="+s.ts.GetFrontendHostPort(),
				"COURIER_IT_NAMESPACE="+s.ts.GetDefaultNamespace(),
				"COURIER_IT_DB="+s.dsn,
				"COURIER_IT_NATS="+s.nats.URL(),
			)
			cmd.Stderr = os.Stderr
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
			require.Eventually(t, func() bool { return s.sentCount(ctx, "key-") >= keys*per/4 }, 2*time.Minute, 10*time.Millisecond,
				"the first worker makes progress")
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			_, _ = cmd.Process.Wait()
			killedAt := s.sentCount(ctx, "key-")
			require.Less(t, killedAt, int64(keys*per), "the kill landed mid-stream")
			t.Logf("killed the worker with %d of %d sent", killedAt, keys*per)

			w, err := worker.New(worker.Config{Relay: orderedRelay(), ShutdownTimeout: 5 * time.Second}, worker.Deps{
				Temporal: s.tc, Sources: []relay.Source{{Name: courier.DefaultSource, Store: s.store}}, Publisher: s.pub, Logger: quiet,
			})
			require.NoError(t, err)
			require.NoError(t, w.Start(ctx))
			t.Cleanup(w.Stop)
			require.Eventually(t, func() bool { return s.sentCount(ctx, "key-") == keys*per }, 3*time.Minute, 50*time.Millisecond)
			want := map[string]int{}
			for k := range keys {
				want[fmt.Sprintf("key-%02d", k)] = per
			}
			s.requireKeyOrder("ORDERS", want)
		})
	}
}

// workerOrderedEnv set to 1 makes the worker subprocess run the ordered tests' relay.
const workerOrderedEnv = "COURIER_IT_ORDERED"
