package integration

import (
	"context"
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/relay"
)

// Ordered keys across two brokers: keys whose records alternate between a topic routed to
// "points" and one routed to "coupons" go out in commit order across both (each record stored
// after the one before it was acknowledged, by the brokers' own clocks), and while points is
// down those keys wait at their points record while keys only on coupons all flow.
func TestOrderedKeysAcrossBrokers(t *testing.T) {
	s := newRoutedStack(t)
	s.points.createStream("POINTS", "points.>")
	s.coupons.createStream("COUPONS", "coupons.>")
	s.ordered = relay.OrderedConfig{Topics: []string{"points.>", "coupons.>"}}
	s.route(true, mq.Route{Pattern: "points.>", Broker: "points"}, mq.Route{Pattern: "coupons.>", Broker: "coupons"})
	s.points.stop()
	require.Eventually(t, func() bool { return !s.router.Up("points") }, 30*time.Second, 20*time.Millisecond)

	const per = 10
	mixed, couponsOnly := []string{"m-0", "m-1", "m-2"}, []string{"c-0", "c-1", "c-2"}
	ctx := t.Context()
	for n := range per {
		for _, key := range append(append([]string(nil), mixed...), couponsOnly...) {
			topic := "coupons." + key
			if key[0] == 'm' && n%2 == 0 {
				topic = "points." + key // a mixed key starts on points
			}
			body, _ := json.Marshal(orderedMsg{Key: key, N: n})
			require.NoError(t, s.store.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				_, err := outbox.Enqueue(ctx, tx, outbox.Message{Topic: topic, Key: key, Payload: body})
				return err
			}))
		}
	}
	sent := func(prefix string) int {
		n, err := s.store.DB().NewSelect().TableExpr("courier_outbox").Where("status = 'sent'").Where(`"key" LIKE ?`, prefix+"%").Count(ctx)
		require.NoError(t, err)
		return int(n)
	}
	require.Eventually(t, func() bool { return sent("c-") == len(couponsOnly)*per }, 2*time.Minute, 50*time.Millisecond,
		"keys on the broker that is up flow")
	require.Zero(t, sent("m-"), "a key waits at its record for the broker that is down")
	require.Eventually(t, func() bool {
		n, err := s.store.DB().NewSelect().TableExpr("courier_outbox").Where("attempts > 0").Where(`"key" LIKE 'm-%'`).Count(ctx)
		require.NoError(t, err)
		return int(n) == len(mixed) // each mixed key's first record, and only it, has tried
	}, time.Minute, 50*time.Millisecond)

	s.points.start()
	require.Eventually(t, func() bool { return sent("m-") == len(mixed)*per }, 3*time.Minute, 100*time.Millisecond)

	type stored struct {
		n  int
		at time.Time
	}
	byKey := map[string][]stored{}
	for _, c := range []struct {
		cluster *natsCluster
		stream  string
	}{{s.points, "POINTS"}, {s.coupons, "COUPONS"}} {
		st, err := c.cluster.js().Stream(ctx, c.stream)
		require.NoError(t, err)
		cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		require.NoError(t, err)
		info, err := st.Info(ctx)
		require.NoError(t, err)
		for got := uint64(0); got < info.State.Msgs; {
			batch, err := cons.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
			require.NoError(t, err)
			for m := range batch.Messages() {
				var om orderedMsg
				require.NoError(t, json.Unmarshal(m.Data(), &om))
				md, err := m.Metadata()
				require.NoError(t, err)
				byKey[om.Key] = append(byKey[om.Key], stored{om.N, md.Timestamp})
				got++
			}
			require.NoError(t, batch.Error())
		}
	}
	for _, key := range append(mixed, couponsOnly...) {
		got := byKey[key]
		sort.Slice(got, func(i, j int) bool { return got[i].at.Before(got[j].at) })
		seq := make([]int, len(got))
		for i, g := range got {
			seq[i] = g.n
		}
		want := make([]int, per)
		for i := range want {
			want[i] = i
		}
		require.Equal(t, want, seq, "key %s: stored in commit order across both brokers, each once", key)
	}
}
