package activities_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/mq"
)

// batchStore is a canned outbox table: the records it holds, and what the batch did to them.
type batchStore struct {
	recs   map[int64]courier.OutboxRecord
	sent   []int64
	handed map[int64]string
	held   []int64
}

func (s *batchStore) GetOutbox(_ context.Context, id int64) (courier.OutboxRecord, error) {
	return s.recs[id], nil
}
func (s *batchStore) RecordOutboxAttempt(context.Context, int64, string, time.Duration) error {
	return nil
}
func (s *batchStore) MarkOutboxSent(context.Context, int64) (bool, error)         { return true, nil }
func (s *batchStore) MarkOutboxDead(context.Context, int64, string) (bool, error) { return true, nil }
func (s *batchStore) LoadOutboxBatch(_ context.Context, ids []int64) ([]courier.OutboxRecord, error) {
	var out []courier.OutboxRecord
	for _, id := range ids {
		if r, ok := s.recs[id]; ok {
			out = append(out, r)
		}
	}
	return out, nil
}
func (s *batchStore) MarkOutboxSentBatch(_ context.Context, ids []int64) (int64, error) {
	s.sent = append(s.sent, ids...)
	return int64(len(ids)), nil
}
func (s *batchStore) HandOutboxToRecord(_ context.Context, id int64, lastErr string, _ time.Duration) (bool, error) {
	s.handed[id] = lastErr
	return true, nil
}

func (s *batchStore) HoldOutbox(_ context.Context, id int64, _ time.Duration) (bool, error) {
	s.held = append(s.held, id)
	return true, nil
}

// failingPub acknowledges every message except those on topic "down.x".
type failingPub struct {
	mu  sync.Mutex
	got []string
}

func (p *failingPub) Publish(_ context.Context, m mq.Message) error {
	if m.Topic == "down.x" {
		return errors.New("broker said no")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, m.ID)
	return nil
}
func (p *failingPub) Ping(context.Context) error { return nil }
func (p *failingPub) Close() error               { return nil }

// One batch: the good records are published with their outbox ids and marked sent together; a
// record the broker refused and one that breaks the message rule are handed to deliveries of
// their own with their reasons and never marked sent; a sent record is skipped, not published.
func TestPublishBatch(t *testing.T) {
	st := &batchStore{handed: map[int64]string{}, recs: map[int64]courier.OutboxRecord{
		1: {ID: 1, Topic: "orders.created", Payload: []byte(`1`), Status: courier.OutboxDispatched},
		2: {ID: 2, Topic: "down.x", Payload: []byte(`2`), Status: courier.OutboxDispatched},
		3: {ID: 3, Topic: "$JS.API.STREAM.PURGE.X", Payload: []byte(`3`), Status: courier.OutboxDispatched},
		4: {ID: 4, Topic: "orders.created", Payload: []byte(`4`), Status: courier.OutboxSent},
		5: {ID: 5, Topic: "orders.created", Payload: []byte(`5`), Status: courier.OutboxPending},
	}}
	pub := &failingPub{}
	a := activities.NewOutbox(map[string]activities.OutboxStore{"src": st}, pub, nil)
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a.PublishBatch)
	v, err := env.ExecuteActivity(a.PublishBatch, contract.BatchParams{Source: "src", IDs: []int64{1, 2, 3, 4, 5, 6}})
	require.NoError(t, err)
	var res contract.BatchResult
	require.NoError(t, v.Get(&res))

	require.Equal(t, 2, res.Sent)
	require.Equal(t, 2, res.Skipped, "the sent record and the missing id")
	require.ElementsMatch(t, []int64{2, 3}, res.Handed)
	require.ElementsMatch(t, []int64{1, 5}, st.sent)
	require.ElementsMatch(t, []string{courier.OutboxMessageID("src", 1), courier.OutboxMessageID("src", 5)}, pub.got)
	require.Contains(t, st.handed[2], "broker said no")
	require.Contains(t, st.handed[3], "refused, never published")
	require.NotContains(t, st.handed[3], "retryable", "the reason is the message, not Temporal's wrapper")
}

// A record whose topic is paused stays out of the batch's publish: it is held (pending again,
// no attempt counted, not handed to a delivery of its own); the others go out.
func TestPublishBatchHoldsPausedTopics(t *testing.T) {
	st := &batchStore{handed: map[int64]string{}, recs: map[int64]courier.OutboxRecord{
		1: {ID: 1, Topic: "orders.created", Payload: []byte(`1`), Status: courier.OutboxDispatched},
		2: {ID: 2, Topic: "other.y", Payload: []byte(`2`), Status: courier.OutboxDispatched},
	}}
	pub := &failingPub{}
	paused := courier.NewPauses([]courier.Pause{{Kind: courier.PauseTopic, Name: "orders.>"}})
	a := activities.NewOutbox(map[string]activities.OutboxStore{"src": st}, pub, nil).
		WithPauses(func() courier.Pauses { return paused })
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a.PublishBatch)
	v, err := env.ExecuteActivity(a.PublishBatch, contract.BatchParams{Source: "src", IDs: []int64{1, 2}})
	require.NoError(t, err)
	var res contract.BatchResult
	require.NoError(t, v.Get(&res))
	require.Equal(t, 1, res.Sent)
	require.Equal(t, []int64{1}, res.Held)
	require.Equal(t, []int64{1}, st.held)
	require.Empty(t, st.handed)
	require.Equal(t, []string{courier.OutboxMessageID("src", 2)}, pub.got)
}
