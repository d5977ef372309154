package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/dispatch"
	"github.com/courier-oss/courier/internal/testenv"
)

// BenchmarkClaimBacklog measures one claim-and-finish cycle of 10 tasks from a band holding a
// backlog of 10,110 ready tasks (keys of 10,000, 100 and 10), on a queue that ignores the keys
// and on one whose keys take turns: the keyed claim's cost at a large backlog, per task.
//
//	go test ./store/ -run '^$' -bench BenchmarkClaimBacklog -benchtime 200x
func BenchmarkClaimBacklog(b *testing.B) {
	for _, d := range testenv.Dialects {
		for _, keyed := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/keyed=%t", d, keyed), func(b *testing.B) {
				s, _ := testenv.Store(b, d)
				ctx := context.Background()
				_, _, err := s.PutQueue(ctx, courier.Queue{Name: "q", PushURL: "http://127.0.0.1:9/push", ConcurrencyLimit: 10, PerKeyLimit: map[bool]int{true: 6}[keyed]})
				require.NoError(b, err)
				// The backlog in one statement per key, for speed.
				for _, k := range []struct {
					key string
					n   int
				}{{"big", 10000}, {"mid", 100}, {"small", 10}} {
					_, err := s.DB().NewRaw("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "+
						"INSERT INTO courier_tasks (task_id, version, queue, priority, concurrency_key, status, payload) "+
						"SELECT ? || '-' || i, 1, 'q', 3, ?, 'pending', '{}' FROM n", k.n, k.key, k.key).Exec(ctx)
					require.NoError(b, err)
				}
				if d == "postgres" {
					_, err := s.DB().ExecContext(ctx, "ANALYZE courier_tasks")
					require.NoError(b, err)
				}
				ch := dispatch.New()
				claimed := 0
				b.ResetTimer()
				for range b.N {
					c, err := ch.Claim(ctx, s, "q", 10)
					got := c.Attempts
					require.NoError(b, err)
					for _, c := range got {
						_, err := s.FinishTaskAttempt(ctx, c.TaskID, c.Version, c.Attempt, contract.AttemptOutcome{Kind: courier.OutcomeSuccess})
						require.NoError(b, err)
					}
					claimed += len(got)
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(max(claimed, 1)), "µs/task")
			})
		}
	}
}
