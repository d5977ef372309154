package activities_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/store"
)

// orderedStore is batchStore with the ordered mode's statements.
type orderedStore struct {
	batchStore
	attempts map[int64]string
	released []int64
}

func (s *orderedStore) RecordOutboxAttempt(_ context.Context, id int64, lastErr string, _ time.Duration) error {
	s.attempts[id] = lastErr
	return nil
}
func (s *orderedStore) ClaimOrdered(context.Context, string, string, courier.OrderedScope, int, time.Duration, func(string) bool) (store.OrderedClaim, error) {
	return store.OrderedClaim{}, nil
}
func (s *orderedStore) BlockKey(context.Context, int64, string) (bool, error) { return true, nil }
func (s *orderedStore) ReleaseOutbox(_ context.Context, ids []int64, _ time.Duration) error {
	s.released = append(s.released, ids...)
	return nil
}

// A key's records are published in the order given (not id order), each after the one before
// it; the first that fails stops the run: it has its attempt counted, the ones after it go back
// to pending unpublished, the ones before it are marked sent.
func TestPublishOrderedStopsAtTheFirstFailure(t *testing.T) {
	st := &orderedStore{attempts: map[int64]string{}, batchStore: batchStore{handed: map[int64]string{}, recs: map[int64]courier.OutboxRecord{
		7: {ID: 7, Topic: "orders.created", Key: "k", Payload: []byte(`7`), Status: courier.OutboxDispatched},
		3: {ID: 3, Topic: "orders.updated", Key: "k", Payload: []byte(`3`), Status: courier.OutboxDispatched, Attempts: 2},
		5: {ID: 5, Topic: "down.x", Key: "k", Payload: []byte(`5`), Status: courier.OutboxDispatched, Attempts: 1},
		9: {ID: 9, Topic: "orders.updated", Key: "k", Payload: []byte(`9`), Status: courier.OutboxDispatched},
	}}}
	pub := &failingPub{}
	a := activities.NewOutbox(map[string]activities.OutboxStore{"src": st}, pub, nil)
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a.PublishOrdered)
	v, err := env.ExecuteActivity(a.PublishOrdered, contract.PublishOrderedParams{Source: "src", IDs: []int64{7, 3, 5, 9}})
	require.NoError(t, err)
	var res contract.PublishOrderedResult
	require.NoError(t, v.Get(&res))
	require.Equal(t, 2, res.Sent)
	require.Equal(t, int64(5), res.FailedID)
	require.Equal(t, 2, res.FailedAttempts)
	require.False(t, res.Permanent)
	require.Equal(t, []string{courier.OutboxMessageID("src", 7), courier.OutboxMessageID("src", 3)}, pub.got, "in the order given")
	require.Equal(t, []int64{7, 3}, st.sent)
	require.Contains(t, st.attempts[5], "broker said no")
	require.Equal(t, []int64{9}, st.released, "the records behind the failure wait, unpublished")
}

// A record of a paused topic stops the run the same way, without an attempt: it and the
// records after it go back to pending.
func TestPublishOrderedHoldsAtAPausedTopic(t *testing.T) {
	st := &orderedStore{attempts: map[int64]string{}, batchStore: batchStore{handed: map[int64]string{}, recs: map[int64]courier.OutboxRecord{
		1: {ID: 1, Topic: "other.x", Key: "k", Payload: []byte(`1`), Status: courier.OutboxDispatched},
		2: {ID: 2, Topic: "orders.x", Key: "k", Payload: []byte(`2`), Status: courier.OutboxDispatched},
		3: {ID: 3, Topic: "other.x", Key: "k", Payload: []byte(`3`), Status: courier.OutboxDispatched},
	}}}
	pub := &failingPub{}
	paused := courier.NewPauses([]courier.Pause{{Kind: courier.PauseTopic, Name: "orders.>"}})
	a := activities.NewOutbox(map[string]activities.OutboxStore{"src": st}, pub, nil).WithPauses(func() courier.Pauses { return paused })
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a.PublishOrdered)
	v, err := env.ExecuteActivity(a.PublishOrdered, contract.PublishOrderedParams{Source: "src", IDs: []int64{1, 2, 3}})
	require.NoError(t, err)
	var res contract.PublishOrderedResult
	require.NoError(t, v.Get(&res))
	require.True(t, res.Held)
	require.Equal(t, int64(2), res.FailedID)
	require.Equal(t, 1, res.Sent)
	require.Empty(t, st.attempts, "no attempt counted while paused")
	require.Equal(t, []int64{2, 3}, st.released)
}
