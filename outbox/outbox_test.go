package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/tracing"
)

// rowOnly is a Tx with QueryRowContext alone, as Tx asked for before multi-row inserts: Enqueue
// still takes it, one statement per message.
type rowOnly struct{ tx *sql.Tx }

func (r rowOnly) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return r.tx.QueryRowContext(ctx, query, args...)
}

// forEachHandle runs fn on SQLite and PostgreSQL, with each kind of handle producers pass to
// Enqueue: bun's ("?" placeholders, formatted by bun), database/sql's ($n placeholders) and a
// Tx without QueryContext. handle turns the test's bun.Tx into that kind.
func forEachHandle(t *testing.T, fn func(t *testing.T, s *store.Store, handle func(bun.Tx) outbox.Tx)) {
	handles := map[string]func(bun.Tx) outbox.Tx{
		"bun":      func(tx bun.Tx) outbox.Tx { return tx },
		"sql":      func(tx bun.Tx) outbox.Tx { return tx.Tx },
		"row-only": func(tx bun.Tx) outbox.Tx { return rowOnly{tx.Tx} },
	}
	for _, d := range testenv.Dialects {
		for name, handle := range handles {
			t.Run(d+"/"+name, func(t *testing.T) {
				t.Parallel()
				s, _ := testenv.Store(t, d)
				fn(t, s, handle)
			})
		}
	}
}

// many is more messages than one multi-row INSERT takes (500), so a call crosses statements.
const many = 1203

const traceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// messages returns n distinct messages: every third has a header of its own, and message 1
// carries its own traceparent, which Enqueue keeps.
func messages(n int) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "many." + strconv.Itoa(i), Key: "k" + strconv.Itoa(i), Payload: fmt.Appendf(nil, `{"i":%d}`, i)}
		if i%3 == 0 {
			msgs[i].Headers = map[string]string{"x-i": strconv.Itoa(i)}
		}
	}
	msgs[1].Headers = map[string]string{courier.HeaderTraceParent: "00-11111111111111111111111111111111-2222222222222222-01"}
	return msgs
}

// all returns every row of the outbox by id.
func all(t *testing.T, s *store.Store) map[int64]courier.OutboxRecord {
	t.Helper()
	byID := map[int64]courier.OutboxRecord{}
	for after, more := int64(0), true; more; {
		recs, m, err := s.ListOutbox(t.Context(), courier.OutboxFilter{AfterID: after, Limit: 1000, WithPayload: true})
		require.NoError(t, err)
		for _, rec := range recs {
			byID[rec.ID] = rec
			after = rec.ID
		}
		more = m
	}
	return byID
}

// Many messages in one call: the ids come back in message order, each naming the row with that
// message's topic, key, payload and headers (the producer's trace context added where the
// message set none).
func TestEnqueueManyKeepsOrder(t *testing.T) {
	forEachHandle(t, func(t *testing.T, s *store.Store, handle func(bun.Tx) outbox.Tx) {
		ctx := tracing.ContextWith(t.Context(), courier.TraceContext{Parent: traceParent, State: "vendor=1"})
		msgs := messages(many)
		var ids []int64
		require.NoError(t, s.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			var err error
			ids, err = outbox.Enqueue(ctx, handle(tx), msgs...)
			return err
		}))
		require.Len(t, ids, many)
		rows := all(t, s)
		require.Len(t, rows, many)
		for i, m := range msgs {
			if i > 0 {
				require.Greater(t, ids[i], ids[i-1], "ids ascend in message order")
			}
			rec, ok := rows[ids[i]]
			require.True(t, ok, "message %d: no row %d", i, ids[i])
			require.Equal(t, m.Topic, rec.Topic, "message %d", i)
			require.Equal(t, m.Key, rec.Key, "message %d", i)
			require.Equal(t, m.Payload, rec.Payload, "message %d", i)
			want := map[string]string{courier.HeaderTraceParent: traceParent, courier.HeaderTraceState: "vendor=1"}
			for k, v := range m.Headers {
				want[k] = v
			}
			if i == 1 {
				want = m.Headers // its own trace context wins
			}
			require.Equal(t, want, rec.Headers, "message %d", i)
		}
	})
}

// A rolled-back transaction leaves none of its messages behind.
func TestEnqueueManyRolledBack(t *testing.T) {
	forEachHandle(t, func(t *testing.T, s *store.Store, handle func(bun.Tx) outbox.Tx) {
		tx, err := s.DB().BeginTx(t.Context(), nil)
		require.NoError(t, err)
		ids, err := outbox.Enqueue(t.Context(), handle(tx), messages(many)...)
		require.NoError(t, err)
		require.Len(t, ids, many)
		require.NoError(t, tx.Rollback())
		require.Empty(t, all(t, s))
	})
}

// One invalid message anywhere fails the call before anything is written: even a transaction
// that commits after the error holds none of the valid messages.
func TestEnqueueInvalidMessageInsertsNothing(t *testing.T) {
	forEachHandle(t, func(t *testing.T, s *store.Store, handle func(bun.Tx) outbox.Tx) {
		msgs := messages(many)
		msgs[700].Payload = nil
		tx, err := s.DB().BeginTx(t.Context(), nil)
		require.NoError(t, err)
		ids, err := outbox.Enqueue(t.Context(), handle(tx), msgs...)
		require.ErrorContains(t, err, "message 700")
		require.Equal(t, courier.CodeValidation, courier.ErrorCode(err))
		require.Nil(t, ids)
		require.NoError(t, tx.Commit())
		require.Empty(t, all(t, s))
	})
}

// counting is a *sql.Tx that counts the statements Enqueue sends through it.
type counting struct {
	*sql.Tx
	queries, queryRows int
}

func (c *counting) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	c.queries++
	return c.Tx.QueryContext(ctx, query, args...)
}

func (c *counting) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	c.queryRows++
	return c.Tx.QueryRowContext(ctx, query, args...)
}

// With QueryContext, 1,203 messages take three statements (500 rows each at most).
func TestEnqueueManyInFewStatements(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			s, _ := testenv.Store(t, d)
			tx, err := s.DB().DB.BeginTx(t.Context(), nil)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback() }()
			c := &counting{Tx: tx}
			ids, err := outbox.Enqueue(t.Context(), c, messages(many)...)
			require.NoError(t, err)
			require.Len(t, ids, many)
			require.Equal(t, 3, c.queries)
			require.Zero(t, c.queryRows)
		})
	}
}
