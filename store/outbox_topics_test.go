package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/store"
)

// A claim leaves out the records of paused topic patterns in SQL exactly as courier.MatchTopic
// matches them (case and all), on both databases; the one kind of pattern SQL cannot match
// exactly is not applied in the claim at all (the relay hands such rows back).
func TestClaimSkipsPausedTopics(t *testing.T) {
	topics := []string{"orders", "orders.created", "orders.created.eu", "Orders.created", "orders_x.a",
		"ordersx.a", "a.b.c", "a.x.c", "a.b.c.d", "x.created", "x.created.eu", "y.b.created.z", "a_b.c"}
	patterns := []string{"orders.>", "orders.*", "orders", "a.*.c", "*.created", "a.>", "*.*.created.>", "a_b.*", ">"}
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		for _, p := range patterns {
			for _, topic := range topics {
				enqueue(t, s, msg(topic))
			}
			recs, err := s.ClaimOutboxWhere(ctx, 100, time.Hour, store.ClaimFilter{PausedTopics: []string{p}})
			require.NoError(t, err)
			got := map[string]bool{}
			for _, r := range recs {
				got[r.Topic] = true
			}
			for _, topic := range topics {
				want := !courier.MatchTopic(p, topic) || !store.TopicPatternExact(p)
				require.Equal(t, want, got[topic], "pattern %q, topic %q", p, topic)
			}
			// Clear the table for the next pattern: whatever was left is claimed now.
			rest, err := s.ClaimOutbox(ctx, 100, time.Hour)
			require.NoError(t, err)
			for _, r := range append(recs, rest...) {
				_, err := s.MarkOutboxSent(ctx, r.ID)
				require.NoError(t, err)
			}
		}
	})
}
