package store_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/store"
)

// A batch loads its rows in one query, marks the published ones sent in one statement (a second
// time is harmless), and a row handed to its own delivery is pending again with the attempt
// counted, which the next claim reports so the relay no longer batches it.
func TestOutboxBatchStatements(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		ids := enqueue(t, s, msg("a"), msg("b"), msg("c"), msg("d"))
		claimed, err := s.ClaimOutbox(ctx, 10, time.Hour)
		require.NoError(t, err)
		require.Len(t, claimed, 4)
		for _, c := range claimed {
			require.Zero(t, c.Attempts, "a fresh row has no attempts")
		}

		recs, err := s.LoadOutboxBatch(ctx, []int64{ids[2], ids[0], 987654})
		require.NoError(t, err)
		require.Len(t, recs, 2, "an unknown id is left out")
		require.Equal(t, ids[0], recs[0].ID, "in id order")
		require.Equal(t, `{"a":1}`, string(recs[1].Payload), "with the payload")
		require.Equal(t, map[string]string{"h": "v"}, recs[1].Headers)

		n, err := s.MarkOutboxSentBatch(ctx, []int64{ids[0], ids[1]})
		require.NoError(t, err)
		require.EqualValues(t, 2, n)
		n, err = s.MarkOutboxSentBatch(ctx, []int64{ids[0], ids[1]})
		require.NoError(t, err)
		require.Zero(t, n, "a repeated batch marks nothing")
		rec, err := s.GetOutbox(ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, courier.OutboxSent, rec.Status)
		require.Equal(t, 1, rec.Attempts)
		require.NotNil(t, rec.SentAt)

		ok, err := s.HandOutboxToRecord(ctx, ids[2], "mq: publish failed", 0)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.HandOutboxToRecord(ctx, ids[0], "late", 0)
		require.NoError(t, err)
		require.False(t, ok, "a sent row is never handed back")
		rec, err = s.GetOutbox(ctx, ids[2])
		require.NoError(t, err)
		require.Equal(t, courier.OutboxPending, rec.Status)
		require.Equal(t, "mq: publish failed", rec.LastError)

		ok, err = s.MarkOutboxDead(ctx, ids[3], "gone")
		require.NoError(t, err)
		require.True(t, ok)
		n, err = s.MarkOutboxSentBatch(ctx, []int64{ids[3]})
		require.NoError(t, err)
		require.Zero(t, n, "a dead row is never marked sent by a batch")

		claimed, err = s.ClaimOutbox(ctx, 10, time.Hour)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.Equal(t, ids[2], claimed[0].ID)
		require.Equal(t, 1, claimed[0].Attempts, "the claim reports the attempt")
	})
}

// A record names the workflow that took it last (courier_outbox.workflow_id and the domain's
// RunID): none while it waits unclaimed; its own delivery once claimed; the batch the relay
// hands it to, before the batch starts (and none again if it could not start); the key's run
// once the key's delivery claims it, kept while it waits behind its key's head, when it is
// sent and when it is dead. A reserved row (a timer to arm) never names one.
func TestOutboxRecordsNameTheirRun(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		runOf := func(id int64) string {
			t.Helper()
			rec, err := s.GetOutbox(ctx, id)
			require.NoError(t, err)
			return rec.RunID("accounts")
		}
		ids := enqueue(t, s, msg("a"), msg("b"), msg("c"))
		require.Empty(t, runOf(ids[0]), "a record no workflow has taken names none")

		claimed, err := s.ClaimOutbox(ctx, 10, time.Hour)
		require.NoError(t, err)
		require.Len(t, claimed, 3)
		require.Equal(t, "outbox/accounts/"+strconv.FormatInt(ids[0], 10), runOf(ids[0]), "claimed: its own delivery")

		const batch = "outbox-batch/accounts/1-2"
		require.NoError(t, s.AssignOutboxRun(ctx, ids[:2], batch))
		require.Equal(t, batch, runOf(ids[0]))
		n, err := s.MarkOutboxSentBatch(ctx, ids[:1])
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		require.Equal(t, batch, runOf(ids[0]), "sent by its batch")
		require.NoError(t, s.AssignOutboxRun(ctx, ids[:1], "other"))
		require.Equal(t, batch, runOf(ids[0]), "only a claimed record is handed to a run")
		ok, err := s.HandOutboxToRecord(ctx, ids[1], "mq: publish failed", 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, batch, runOf(ids[1]), "handed out of its batch: the batch tried it last")
		claimed, err = s.ClaimOutbox(ctx, 10, time.Hour)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.Equal(t, "outbox/accounts/"+strconv.FormatInt(ids[1], 10), runOf(ids[1]), "claimed again: its own delivery")

		// A batch that could not start: its records name none again and go back to pending.
		require.NoError(t, s.AssignOutboxRun(ctx, ids[2:], batch))
		require.NoError(t, s.AssignOutboxRun(ctx, ids[2:], ""))
		require.NoError(t, s.ReleaseOutbox(ctx, ids[2:], 0))
		require.Empty(t, runOf(ids[2]))

		// A timer row is armed by the relay itself: no workflow of the outbox takes it.
		timer := enqueue(t, s, msg(outbox.TimerTopic))
		claimed, err = s.ClaimOutbox(ctx, 10, time.Hour)
		require.NoError(t, err)
		require.NotEmpty(t, claimed)
		_, err = s.MarkOutboxSent(ctx, timer[0])
		require.NoError(t, err)
		require.Empty(t, runOf(timer[0]))

		// Ordered: the key's claim names the key's run on every record it takes.
		keyed := enqueue(t, s, outbox.Message{Topic: "orders.a", Key: "ord", Payload: []byte(`{}`)},
			outbox.Message{Topic: "orders.a", Key: "ord", Payload: []byte(`{}`)})
		const key = "outbox-key/accounts/ord"
		c, err := s.ClaimOrdered(ctx, "ord", key, courier.OrderedScope{All: true}, 5, time.Hour, nil)
		require.NoError(t, err)
		require.Equal(t, keyed, c.IDs)
		require.NoError(t, s.RecordOutboxAttempt(ctx, keyed[0], "broker down", time.Second))
		require.NoError(t, s.ReleaseOutbox(ctx, keyed[1:], 0))
		require.Equal(t, key, runOf(keyed[1]), "waiting behind its key's head, in the key's run")
		blocked, err := s.BlockKey(ctx, keyed[0], "broker down")
		require.NoError(t, err)
		require.True(t, blocked)
		require.Equal(t, key, runOf(keyed[0]), "dead: the key's run that gave up on it")
		_, err = s.RedriveOutbox(ctx, keyed[0])
		require.NoError(t, err)
		require.Equal(t, key, runOf(keyed[0]), "redriven: the run that tried it last, until one takes it again")
	})
}

// A started batch's late mark moves only the rows still dispatched under its name to the orphan
// check: a row the batch sent, or handed over and a later claim took again, keeps its own due
// time, so the mark never stretches a later claim's lease.
func TestBatchStartedMarkOnlyTouchesItsOwnRows(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		ids := enqueue(t, s, msg("a"), msg("b"), msg("c"))
		recs, err := s.ClaimOutbox(ctx, 10, -time.Second) // lease already over
		require.NoError(t, err)
		require.Len(t, recs, 3)
		require.NoError(t, s.AssignOutboxRun(ctx, ids, "outbox-batch/default/1-3"))
		n, err := s.MarkOutboxSentBatch(ctx, ids[:1])
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		again, err := s.ClaimOutboxWhere(ctx, 1, -time.Second, store.ClaimFilter{}) // the row's next claim, before the mark lands
		require.NoError(t, err)
		require.Len(t, again, 1)
		require.Equal(t, ids[1], again[0].ID)

		require.NoError(t, s.MarkOutboxBatchStarted(ctx, ids, "outbox-batch/default/1-3", time.Hour))
		due, err := s.ClaimOutbox(ctx, 10, time.Hour)
		require.NoError(t, err)
		require.Len(t, due, 1, "the re-claimed row kept its own (expired) lease; the batch's unsent row waits for the orphan check")
		require.Equal(t, ids[1], due[0].ID)
		rec, err := s.GetOutbox(ctx, ids[2])
		require.NoError(t, err)
		require.True(t, rec.NextAttemptAt.After(time.Now().Add(50*time.Minute)))
		rec, err = s.GetOutbox(ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, courier.OutboxSent, rec.Status)
	})
}
