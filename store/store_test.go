package store_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/store"
)

// The conformance suite: every case runs on SQLite and on PostgreSQL.
func forEachDialect(t *testing.T, fn func(t *testing.T, s *store.Store)) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			s, _ := testenv.Store(t, d)
			fn(t, s)
		})
	}
}

func enqueue(t *testing.T, s *store.Store, msgs ...outbox.Message) []int64 {
	t.Helper()
	var ids []int64
	err := s.DB().RunInTx(context.Background(), nil, func(ctx context.Context, tx bun.Tx) error {
		var err error
		ids, err = outbox.Enqueue(ctx, tx, msgs...)
		return err
	})
	require.NoError(t, err)
	return ids
}

func msg(topic string) outbox.Message {
	return outbox.Message{Topic: topic, Key: "k", Payload: []byte(`{"a":1}`), Headers: map[string]string{"h": "v"}}
}

func TestEnqueueAndGet(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ids := enqueue(t, s, msg("a.b"), msg("c"))
		require.Len(t, ids, 2)
		require.Less(t, ids[0], ids[1])
		rec, err := s.GetOutbox(ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, "a.b", rec.Topic)
		require.Equal(t, "k", rec.Key)
		require.Equal(t, []byte(`{"a":1}`), rec.Payload)
		require.Equal(t, map[string]string{"h": "v"}, rec.Headers)
		require.Equal(t, courier.OutboxPending, rec.Status)
		require.WithinDuration(t, time.Now(), rec.CreatedAt, time.Minute)
		require.Nil(t, rec.SentAt)

		_, err = s.GetOutbox(ctx, 999999)
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err))
	})
}

// A *sql.Tx (not bun) works too, and a rolled-back transaction leaves nothing behind.
func TestEnqueueSQLTxAndRollback(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		tx, err := s.DB().DB.BeginTx(ctx, nil)
		require.NoError(t, err)
		ids, err := outbox.Enqueue(ctx, tx, msg("rolled.back"))
		require.NoError(t, err)
		require.NoError(t, tx.Rollback())
		_, err = s.GetOutbox(ctx, ids[0])
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err))

		tx, err = s.DB().DB.BeginTx(ctx, nil)
		require.NoError(t, err)
		ids, err = outbox.Enqueue(ctx, tx, msg("committed"))
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		rec, err := s.GetOutbox(ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, "committed", rec.Topic)
	})
}

func TestEnqueueRejectsBadMessages(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		for name, m := range map[string]outbox.Message{
			"no topic":    {Payload: []byte("x")},
			"wildcard":    {Topic: "a.>", Payload: []byte("x")},
			"nil payload": {Topic: "a"},
			"too large":   {Topic: "a", Payload: make([]byte, outbox.MaxPayloadBytes+1)},
		} {
			err := s.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				_, err := outbox.Enqueue(ctx, tx, m)
				return err
			})
			require.Error(t, err, name)
		}
		recs, _, err := s.ListOutbox(ctx, courier.OutboxFilter{})
		require.NoError(t, err)
		require.Empty(t, recs)
	})
}

func TestClaimLeasesAndReleases(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ids := enqueue(t, s, msg("a"), msg("b"), msg("c"))
		recs, err := s.ClaimOutbox(ctx, 10, time.Hour)
		require.NoError(t, err)
		require.Len(t, recs, 3)
		require.Equal(t, "a", recs[0].Topic)
		for _, id := range ids {
			rec, err := s.GetOutbox(ctx, id)
			require.NoError(t, err)
			require.Equal(t, courier.OutboxDispatched, rec.Status)
		}
		again, err := s.ClaimOutbox(ctx, 10, time.Hour)
		require.NoError(t, err)
		require.Empty(t, again, "leased rows are not claimed again")

		// A row whose delivery could not start goes back to pending and is due again.
		require.NoError(t, s.ReleaseOutbox(ctx, []int64{ids[1]}, 0))
		rec, err := s.GetOutbox(ctx, ids[1])
		require.NoError(t, err)
		require.Equal(t, courier.OutboxPending, rec.Status)
		again, err = s.ClaimOutbox(ctx, 10, time.Hour)
		require.NoError(t, err)
		require.Len(t, again, 1)
		require.Equal(t, ids[1], again[0].ID)
	})
}

// A claimed row whose lease runs out (its relay died before starting the delivery) is claimed
// again; a sent row never is.
func TestExpiredLeaseIsReclaimed(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ids := enqueue(t, s, msg("a"), msg("b"))
		recs, err := s.ClaimOutbox(ctx, 10, -time.Second) // a lease that has already run out
		require.NoError(t, err)
		require.Len(t, recs, 2)
		_, err = s.MarkOutboxSent(ctx, ids[0])
		require.NoError(t, err)
		again, err := s.ClaimOutbox(ctx, 10, time.Hour)
		require.NoError(t, err)
		require.Len(t, again, 1)
		require.Equal(t, ids[1], again[0].ID)
	})
}

// Concurrent claimers never claim the same row twice (SKIP LOCKED on PostgreSQL, serialised
// transactions on SQLite), and together they claim every row.
func TestConcurrentClaimsAreDisjoint(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		const rows = 300
		msgs := make([]outbox.Message, rows)
		for i := range msgs {
			msgs[i] = msg("t")
		}
		enqueue(t, s, msgs...)
		var (
			mu   sync.Mutex
			seen = map[int64]int{}
			wg   sync.WaitGroup
		)
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					recs, err := s.ClaimOutbox(ctx, 7, time.Hour)
					if err != nil {
						t.Errorf("claim: %v", err)
						return
					}
					if len(recs) == 0 {
						return
					}
					mu.Lock()
					for _, r := range recs {
						seen[r.ID]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		require.Len(t, seen, rows)
		for id, c := range seen {
			require.Equal(t, 1, c, "row %d claimed %d times", id, c)
		}
	})
}

func TestSentDeadRedrive(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ids := enqueue(t, s, msg("a"), msg("b"))

		require.NoError(t, s.RecordOutboxAttempt(ctx, ids[0], "boom", 3*time.Second))
		rec, err := s.GetOutbox(ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, 1, rec.Attempts)
		require.Equal(t, "boom", rec.LastError)
		require.True(t, rec.NextAttemptAt.After(rec.CreatedAt), "next attempt moves into the future")

		ok, err := s.MarkOutboxSent(ctx, ids[0])
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.MarkOutboxSent(ctx, ids[0])
		require.NoError(t, err)
		require.False(t, ok, "marking sent twice is a no-op")
		rec, err = s.GetOutbox(ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, courier.OutboxSent, rec.Status)
		require.NotNil(t, rec.SentAt)
		ok, err = s.MarkOutboxDead(ctx, ids[0], "late")
		require.NoError(t, err)
		require.False(t, ok, "a sent record never becomes dead")

		_, err = s.RedriveOutbox(ctx, ids[0])
		require.Equal(t, courier.CodeConflict, courier.ErrorCode(err), "only dead records can be redriven")
		_, err = s.RedriveOutbox(ctx, 424242)
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err))

		ok, err = s.MarkOutboxDead(ctx, ids[1], "no stream")
		require.NoError(t, err)
		require.True(t, ok)
		dead, _, err := s.ListOutbox(ctx, courier.OutboxFilter{Status: courier.OutboxDead})
		require.NoError(t, err)
		require.Len(t, dead, 1)
		require.Equal(t, "no stream", dead[0].LastError)

		rec, err = s.RedriveOutbox(ctx, ids[1])
		require.NoError(t, err)
		require.Equal(t, courier.OutboxPending, rec.Status)
		require.Equal(t, "no stream", rec.LastError, "the last error stays visible")
		recs, err := s.ClaimOutbox(ctx, 10, time.Hour)
		require.NoError(t, err)
		require.Len(t, recs, 1, "a redriven record is claimable at once")
	})
}

func TestListPaginatesAndFilters(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		var msgs []outbox.Message
		for i := 0; i < 25; i++ {
			topic := "even"
			if i%2 == 1 {
				topic = "odd"
			}
			msgs = append(msgs, msg(topic))
		}
		enqueue(t, s, msgs...)
		var all []int64
		after := int64(0)
		for pages := 1; ; pages++ {
			page, more, err := s.ListOutbox(ctx, courier.OutboxFilter{AfterID: after, Limit: 10})
			require.NoError(t, err)
			for _, r := range page {
				all = append(all, r.ID)
				require.Nil(t, r.Payload, "payloads stay in the database unless asked for")
				require.Equal(t, len(`{"a":1}`), r.PayloadBytes, "but their size is shown")
			}
			require.Equal(t, pages < 3, more, "page %d says whether another follows", pages)
			if !more {
				break
			}
			after = page[len(page)-1].ID
		}
		require.Len(t, all, 25)
		require.True(t, sort.SliceIsSorted(all, func(i, j int) bool { return all[i] < all[j] }))
		odd, more, err := s.ListOutbox(ctx, courier.OutboxFilter{Topic: "odd"})
		require.NoError(t, err)
		require.Len(t, odd, 12)
		require.False(t, more)
	})
}

// A page that loads payloads stops before its payloads pass the budget (but always holds one
// record), and paging on from its last id reaches every record once.
func TestListOutboxPayloadBudget(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		big := make([]byte, 300<<10)
		var msgs []outbox.Message
		for i := 0; i < 10; i++ {
			msgs = append(msgs, outbox.Message{Topic: "big", Payload: big})
		}
		ids := enqueue(t, s, msgs...)
		var seen []int64
		after := int64(0)
		for {
			page, more, err := s.ListOutbox(ctx, courier.OutboxFilter{AfterID: after, Limit: 1000, WithPayload: true, PayloadBudget: 1 << 20})
			require.NoError(t, err)
			require.NotEmpty(t, page)
			var bytes int
			for _, r := range page {
				require.Len(t, r.Payload, len(big))
				bytes += len(r.Payload)
				seen = append(seen, r.ID)
			}
			require.LessOrEqual(t, bytes, 1<<20, "a page's payloads stay within the budget")
			if !more {
				break
			}
			after = page[len(page)-1].ID
		}
		require.Equal(t, ids, seen, "every record once, in order")
		one, more, err := s.ListOutbox(ctx, courier.OutboxFilter{Limit: 5, WithPayload: true, PayloadBudget: 1})
		require.NoError(t, err)
		require.Len(t, one, 1, "a record larger than the budget still makes a page of one")
		require.True(t, more)
	})
}

func TestStatsAndCleanup(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		st, err := s.OutboxStats(ctx)
		require.NoError(t, err)
		require.Nil(t, st.OldestUnsent)
		ids := enqueue(t, s, msg("a"), msg("b"), msg("c"))
		_, err = s.MarkOutboxSent(ctx, ids[0])
		require.NoError(t, err)
		_, err = s.MarkOutboxDead(ctx, ids[1], "x")
		require.NoError(t, err)
		st, err = s.OutboxStats(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), st.ByStatus[courier.OutboxSent])
		require.Equal(t, int64(1), st.ByStatus[courier.OutboxDead])
		require.Equal(t, int64(1), st.ByStatus[courier.OutboxPending])
		require.NotNil(t, st.OldestUnsent)

		n, err := s.DeleteSentOutbox(ctx, time.Now().Add(-time.Hour), 100)
		require.NoError(t, err)
		require.Zero(t, n, "recently sent rows are kept")
		n, err = s.DeleteSentOutbox(ctx, time.Now().Add(time.Hour), 100)
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		_, err = s.GetOutbox(ctx, ids[0])
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err))
	})
}

func TestAPIKeys(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		key, token, err := s.CreateAPIKey(ctx, "ci", []apikey.Scope{apikey.ScopeProducer})
		require.NoError(t, err)
		require.NotContains(t, token, " ")
		got, err := s.LookupAPIKey(ctx, token)
		require.NoError(t, err)
		require.Equal(t, key.ID, got.ID)
		require.True(t, got.Allows(apikey.ScopeProducer))
		require.False(t, got.Allows(apikey.ScopeAdmin))

		var stored string
		require.NoError(t, s.DB().NewSelect().Table("courier_api_keys").Column("key_hash").Where("id = ?", key.ID).Scan(ctx, &stored))
		require.NotContains(t, stored, token[10:], "the token itself is never stored")

		_, err = s.LookupAPIKey(ctx, token+"x")
		require.Equal(t, courier.CodeUnauthenticated, courier.ErrorCode(err))
		require.NoError(t, s.RevokeAPIKey(ctx, key.ID))
		_, err = s.LookupAPIKey(ctx, token)
		require.Equal(t, courier.CodeUnauthenticated, courier.ErrorCode(err))
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(s.RevokeAPIKey(ctx, key.ID)))
	})
}

// A started row is not due again until the orphan-check horizon, and a failed attempt never
// makes a dispatched row due sooner than that.
func TestStartedRowsWaitForTheOrphanCheck(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ids := enqueue(t, s, msg("a"), msg("b"))
		recs, err := s.ClaimOutbox(ctx, 10, -time.Second) // lease already over
		require.NoError(t, err)
		require.Len(t, recs, 2)
		require.NoError(t, s.MarkOutboxStarted(ctx, []int64{ids[0]}, time.Hour))
		require.NoError(t, s.RecordOutboxAttempt(ctx, ids[0], "broker down", time.Second))
		again, err := s.ClaimOutbox(ctx, 10, time.Hour)
		require.NoError(t, err)
		require.Len(t, again, 1, "only the row whose start was never recorded is re-claimed")
		require.Equal(t, ids[1], again[0].ID)
		rec, err := s.GetOutbox(ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, 1, rec.Attempts)
		require.Equal(t, "broker down", rec.LastError)
		require.True(t, rec.NextAttemptAt.After(time.Now().Add(50*time.Minute)), "the failure did not pull the row's next look earlier")

		ok, err := s.MarkOutboxSent(ctx, ids[0])
		require.NoError(t, err)
		require.True(t, ok)
		rec, err = s.GetOutbox(ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, 2, rec.Attempts, "the successful attempt is counted too")
	})
}

// A claim never takes more rows than its limit, however many are due (on PostgreSQL a plain
// IN subquery with LIMIT can be re-scanned while the UPDATE changes the rows it filters on).
func TestClaimOutboxHonoursLimit(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		var msgs []outbox.Message
		for i := 0; i < 200; i++ {
			msgs = append(msgs, msg("a"))
		}
		enqueue(t, s, msgs...)
		for round := 0; round < 4; round++ {
			recs, err := s.ClaimOutbox(ctx, 7, time.Hour)
			require.NoError(t, err)
			require.Len(t, recs, 7)
		}
	})
}
