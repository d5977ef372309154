package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/store"
)

func keyed(topic, key string) outbox.Message {
	return outbox.Message{Topic: topic, Key: key, Payload: []byte(`{}`)}
}

// A key's records are taken one run at a time in order; a key whose next record is out, or
// dead and blocking, is not due; the unordered claim never takes ordered records; skipping
// and redriving unblock the key.
func TestOrderedKeys(t *testing.T) {
	scope := courier.OrderedScope{Topics: []string{"orders.>"}}
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ids := enqueue(t, s, keyed("orders.a", "k1"), keyed("orders.b", "k1"), keyed("orders.a", "k1"),
			keyed("orders.a", "k2"), keyed("orders.a", ""), keyed("other.a", "k1"))
		keys, err := s.OrderedKeysDue(ctx, scope, nil, 10)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"k1", "k2"}, keys)

		// The unordered claim takes the unkeyed record and the other topic's only.
		recs, err := s.ClaimOutboxWhere(ctx, 10, time.Hour, store.ClaimFilter{Ordered: scope})
		require.NoError(t, err)
		require.Len(t, recs, 2)
		require.Equal(t, ids[4], recs[0].ID)
		require.Equal(t, ids[5], recs[1].ID)

		c, err := s.ClaimOrdered(ctx, "k1", "outbox-key/k1", scope, 1, time.Hour, nil)
		require.NoError(t, err)
		require.Equal(t, []int64{ids[0]}, c.IDs)
		keys, err = s.OrderedKeysDue(ctx, scope, nil, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"k2"}, keys, "a key whose next record is out waits")
		// Its own delivery takes it again (after a crash), with the next one.
		c, err = s.ClaimOrdered(ctx, "k1", "outbox-key/k1", scope, 5, time.Hour, nil)
		require.NoError(t, err)
		require.Equal(t, []int64{ids[0], ids[1], ids[2]}, c.IDs)
		// A paused topic stops the run before it.
		c, err = s.ClaimOrdered(ctx, "k1", "outbox-key/k1", scope, 5, time.Hour, func(topic string) bool { return topic == "orders.b" })
		require.NoError(t, err)
		require.Equal(t, []int64{ids[0]}, c.IDs)
		require.False(t, c.Paused)
		require.NoError(t, s.ReleaseOutbox(ctx, ids[1:3], 0))

		ok, err := s.BlockKey(ctx, ids[0], "broker said no")
		require.NoError(t, err)
		require.True(t, ok)
		rec, err := s.GetOutbox(ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, courier.OutboxDead, rec.Status)
		c, err = s.ClaimOrdered(ctx, "k1", "outbox-key/k1", scope, 5, time.Hour, nil)
		require.NoError(t, err)
		require.True(t, c.Blocked)
		keys, err = s.OrderedKeysDue(ctx, scope, nil, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"k2"}, keys)
		blocked, more, err := s.BlockedKeys(ctx, "", 10)
		require.NoError(t, err)
		require.False(t, more)
		require.Len(t, blocked, 1)
		require.Equal(t, "k1", blocked[0].Key)
		require.Equal(t, ids[0], blocked[0].RecordID)
		require.Equal(t, "broker said no", blocked[0].Reason)
		require.Equal(t, int64(3), blocked[0].Waiting, "every unsent record of the key, the unordered topic's too")
		n, err := s.CountBlockedKeys(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), n)

		// Skip: the record stays dead, the key flows from its next record.
		_, err = s.SkipBlocked(ctx, ids[1])
		require.Equal(t, courier.CodeConflict, courier.ErrorCode(err))
		_, err = s.SkipBlocked(ctx, 99999999)
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err))
		b, err := s.SkipBlocked(ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, "k1", b.Key)
		c, err = s.ClaimOrdered(ctx, "k1", "outbox-key/k1", scope, 1, time.Hour, nil)
		require.NoError(t, err)
		require.Equal(t, []int64{ids[1]}, c.IDs)

		// Redrive: blocked again by ids[1], redriven, it is the key's next record again.
		_, err = s.BlockKey(ctx, ids[1], "again")
		require.NoError(t, err)
		_, err = s.RedriveOutbox(ctx, ids[1])
		require.NoError(t, err)
		n, err = s.CountBlockedKeys(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		c, err = s.ClaimOrdered(ctx, "k1", "outbox-key/k1", scope, 5, time.Hour, nil)
		require.NoError(t, err)
		require.Equal(t, []int64{ids[1], ids[2]}, c.IDs)
	})
}

// On PostgreSQL the order is the commit order, not the id order: of two transactions writing
// one key, the one that commits first goes first even though it took the later id.
func TestOrderedKeysCommitOrder(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		if s.DB().Dialect().Name().String() != "pg" {
			t.Skip("SQLite runs one write transaction at a time: ids are taken in commit order")
		}
		ctx := context.Background()
		scope := courier.OrderedScope{All: true}
		_, err := s.TurnOnCommitOrder(ctx, scope)
		require.NoError(t, err)
		first, err := s.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		early, err := outbox.Enqueue(ctx, first, keyed("orders.a", "k"))
		require.NoError(t, err)
		var late []int64
		require.NoError(t, s.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			late, err = outbox.Enqueue(ctx, tx, keyed("orders.b", "k"))
			return err
		}))
		require.Greater(t, late[0], early[0])
		require.NoError(t, first.Commit())
		c, err := s.ClaimOrdered(ctx, "k", "outbox-key/k", scope, 5, time.Hour, nil)
		require.NoError(t, err)
		require.Equal(t, []int64{late[0], early[0]}, c.IDs, "commit order")
	})
}

// On PostgreSQL the commit-time numbering is off until a relay of the ordered mode turns it on:
// off, a keyed insert gets no commit_seq and takes no lock, so two transactions writing the
// same two keys in opposite orders both commit; on, the trigger locks the key and numbers the
// row above every id taken before, for the ordered topics only; later relays widen the topics,
// never narrow them.
func TestCommitOrderSwitch(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		if s.DB().Dialect().Name().String() != "pg" {
			t.Skip("SQLite numbers nothing: ids are taken in commit order")
		}
		ctx := context.Background()
		on, _, err := s.CommitOrder(ctx)
		require.NoError(t, err)
		require.False(t, on, "off by default")

		// insert writes key on topic in tx and fires the deferred trigger now (SET
		// CONSTRAINTS ... IMMEDIATE), so a lock it takes is held until tx ends; it returns the
		// row's id and commit_seq as tx sees them and the advisory locks tx holds.
		insert := func(tx bun.Tx, topic, key string) (id int64, seq *int64, locks int) {
			ids, err := outbox.Enqueue(ctx, tx, keyed(topic, key))
			require.NoError(t, err)
			_, err = tx.ExecContext(ctx, "SET CONSTRAINTS courier_outbox_commit_seq IMMEDIATE")
			require.NoError(t, err)
			require.NoError(t, tx.NewRaw("SELECT commit_seq FROM courier_outbox WHERE id = ?", ids[0]).Scan(ctx, &seq))
			require.NoError(t, tx.NewRaw("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()").Scan(ctx, &locks))
			return ids[0], seq, locks
		}
		// numbered commits one keyed record of topic and reports whether it got a number
		// (above its id, under one lock) or none (and no lock).
		numbered := func(topic string) bool {
			tx, err := s.DB().BeginTx(ctx, nil)
			require.NoError(t, err)
			id, seq, locks := insert(tx, topic, "k")
			require.NoError(t, tx.Commit())
			if seq == nil {
				require.Zero(t, locks, "no lock for a record left unnumbered")
				return false
			}
			require.Greater(t, *seq, id)
			require.Equal(t, 1, locks)
			return true
		}

		turnOn := func(scope courier.OrderedScope) {
			_, err := s.TurnOnCommitOrder(ctx, scope)
			require.NoError(t, err)
		}

		// Off: keys a, b in one transaction and b, a in another, interleaved, both commit.
		t1, err := s.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		t2, err := s.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		for _, step := range []struct {
			tx  bun.Tx
			key string
		}{{t1, "a"}, {t2, "b"}, {t1, "b"}, {t2, "a"}} {
			_, seq, locks := insert(step.tx, "orders.a", step.key)
			require.Nil(t, seq, "no commit_seq while off")
			require.Zero(t, locks, "no lock while off")
		}
		require.NoError(t, t1.Commit())
		require.NoError(t, t2.Commit())
		var n int
		require.NoError(t, s.DB().NewRaw("SELECT count(*) FROM courier_outbox WHERE commit_seq IS NOT NULL").Scan(ctx, &n))
		require.Zero(t, n)

		// On for some topics: only their records are numbered.
		turnOn(courier.OrderedScope{Topics: []string{"orders.>"}})
		require.True(t, numbered("orders.a"))
		require.True(t, numbered("orders.a.b"))
		require.False(t, numbered("orders"))
		require.False(t, numbered("audit.a"))
		// Another relay's topics are added, not put instead.
		turnOn(courier.OrderedScope{Topics: []string{"audit.*"}})
		on, topics, err := s.CommitOrder(ctx)
		require.NoError(t, err)
		require.True(t, on)
		require.Equal(t, []string{"audit.*", "orders.>"}, topics)
		require.True(t, numbered("orders.a"))
		require.True(t, numbered("audit.a"))
		require.False(t, numbered("audit.a.b"))
		// A whole source: every keyed record, and no narrower relay narrows it again.
		turnOn(courier.OrderedScope{All: true})
		turnOn(courier.OrderedScope{Topics: []string{"orders.>"}})
		on, topics, err = s.CommitOrder(ctx)
		require.NoError(t, err)
		require.True(t, on)
		require.Nil(t, topics)
		require.True(t, numbered("users.x"))

		// Off again (the operator's statement): nothing is numbered.
		require.NoError(t, s.SetCommitOrder(ctx, false))
		require.False(t, numbered("orders.a"))
	})
}

// The trigger's regular expression for the ordered topics matches what courier.MatchTopic does.
func TestCommitOrderTopicsMatch(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		if s.DB().Dialect().Name().String() != "pg" {
			t.Skip("PostgreSQL only")
		}
		ctx := context.Background()
		patterns := []string{"orders.>", "a.*.c", "*", "x-y_z.*", ">"}
		topics := []string{"orders", "orders.a", "orders.a.b", "ordersXa", "a.b.c", "a.b.c.d", "a..c", "aXbXc", "b", "b.c",
			"x-y_z.q", "x-y_z", "xAy_z.q"}
		for _, p := range patterns {
			re := store.TopicsRegexp([]string{p})
			for _, topic := range topics {
				var got bool
				require.NoError(t, s.DB().NewRaw("SELECT ? ~ ?", topic, re).Scan(ctx, &got))
				require.Equal(t, courier.MatchTopic(p, topic), got, "%s against %s (%s)", topic, p, re)
			}
		}
	})
}

// Keys are delivered only once no producer that read the switch off can still commit: a
// producer's transaction open across the switch, whose record would go unnumbered, holds
// readiness until it ends.
func TestCommitOrderReadyAfterOpenProducers(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		scope := courier.OrderedScope{All: true}
		if s.DB().Dialect().Name().String() != "pg" {
			ready, err := s.TurnOnCommitOrder(ctx, scope)
			require.NoError(t, err)
			require.True(t, ready, "nothing to wait for on SQLite")
			return
		}
		producer, err := s.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = outbox.Enqueue(ctx, producer, keyed("orders.a", "k"))
		require.NoError(t, err)
		ready, err := s.TurnOnCommitOrder(ctx, scope)
		require.NoError(t, err)
		require.False(t, ready, "a producer open across the switch may commit unnumbered")
		ready, err = s.TurnOnCommitOrder(ctx, scope)
		require.NoError(t, err)
		require.False(t, ready)
		require.NoError(t, producer.Commit())
		// Other tests' transactions on the same server may hold the horizon for a moment.
		require.Eventually(t, func() bool {
			ready, err := s.TurnOnCommitOrder(ctx, scope)
			require.NoError(t, err)
			return ready
		}, 10*time.Second, 10*time.Millisecond)
	})
}
