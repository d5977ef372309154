package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/store"
)

const (
	traceA = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	traceB = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
)

// A claim hands the relay the trace context in each row's headers, whatever the spelling of
// the names; rows without one, or with headers that do not parse, have none.
func TestClaimOutboxReadsTraceContext(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ids := enqueue(t, s,
			outbox.Message{Topic: "a", Payload: []byte("1"), Headers: map[string]string{"traceparent": traceA, "tracestate": "v=1"}},
			outbox.Message{Topic: "b", Payload: []byte("2"), Headers: map[string]string{"Traceparent": traceB}},
			outbox.Message{Topic: "c", Payload: []byte("3")},
		)
		_, err := s.DB().NewRaw("INSERT INTO courier_outbox (topic, payload, headers) VALUES ('d', ?, '[1,2]')", []byte("4")).Exec(ctx)
		require.NoError(t, err)
		recs, err := s.ClaimOutbox(ctx, 10, time.Hour)
		require.NoError(t, err)
		require.Len(t, recs, 4)
		require.Equal(t, ids[0], recs[0].ID)
		require.Equal(t, courier.TraceContext{Parent: traceA, State: "v=1"}, recs[0].Trace)
		require.Equal(t, courier.TraceContext{Parent: traceB}, recs[1].Trace)
		require.True(t, recs[2].Trace.IsZero())
		require.True(t, recs[3].Trace.IsZero(), "malformed headers carry no trace")
	})
}

// A task keeps its inserting request's trace context through the claim; a replace takes the
// new request's, a repeat of the same request keeps the first one's.
func TestTaskTraceContext(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, _, err := s.PutQueue(ctx, courier.Queue{Name: "default", ConcurrencyLimit: 10})
		require.NoError(t, err)
		r := taskReq("t-1", 1, 3, `{"a":1}`)
		r.Trace = courier.TraceContext{Parent: traceA, State: "v=1"}
		task, out, err := s.InsertTask(ctx, r)
		require.NoError(t, err)
		require.Equal(t, courier.TaskCreated, out)
		require.Equal(t, r.Trace, task.Trace)

		again := r
		again.Trace = courier.TraceContext{Parent: traceB}
		task, out, err = s.InsertTask(ctx, again)
		require.NoError(t, err)
		require.Equal(t, courier.TaskExisting, out)
		require.Equal(t, r.Trace, task.Trace, "the same request keeps the first trace")

		changed := taskReq("t-1", 1, 3, `{"a":2}`)
		changed.Trace = courier.TraceContext{Parent: traceB}
		task, out, err = s.InsertTask(ctx, changed)
		require.NoError(t, err)
		require.Equal(t, courier.TaskReplaced, out)
		require.Equal(t, changed.Trace, task.Trace)

		plain := taskReq("t-2", 1, 3, `{}`)
		_, _, err = s.InsertTask(ctx, plain)
		require.NoError(t, err)

		claimed, err := claimTasks(ctx, t, s, "default", 10)
		require.NoError(t, err)
		require.Len(t, claimed, 2)
		byID := map[string]courier.TraceContext{}
		for _, c := range claimed {
			byID[c.TaskID] = c.Trace
		}
		require.Equal(t, courier.TraceContext{Parent: traceB}, byID["t-1"])
		require.True(t, byID["t-2"].IsZero())
	})
}
