package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/store"
)

func TestQueuePutKeepsSecretsUnlessGiven(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		first, second := "whsec_Zmlyc3RmaXJzdGZpcnN0Zmlyc3Q=", "whsec_c2Vjb25kc2Vjb25kc2Vjb25k"
		_, created, err := s.PutQueue(ctx, courier.Queue{Name: "mail", ConcurrencyLimit: 2, Secrets: []string{first}})
		require.NoError(t, err)
		require.True(t, created)

		got, created, err := s.PutQueue(ctx, courier.Queue{Name: "mail", ConcurrencyLimit: 5})
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, 5, got.ConcurrencyLimit, "the rest is replaced")
		require.Equal(t, []string{first}, got.Secrets, "a PUT without secrets keeps the stored ones")
		stored, err := s.GetQueue(ctx, "mail")
		require.NoError(t, err)
		require.Equal(t, []string{first}, stored.Secrets)

		got, _, err = s.PutQueue(ctx, courier.Queue{Name: "mail", Secrets: []string{second, first}})
		require.NoError(t, err)
		require.Equal(t, []string{second, first}, got.Secrets, "a PUT with secrets replaces them")
		got, _, err = s.PutQueue(ctx, courier.Queue{Name: "mail", Secrets: []string{}})
		require.NoError(t, err)
		require.Empty(t, got.Secrets, "an empty list removes them")
		stored, err = s.GetQueue(ctx, "mail")
		require.NoError(t, err)
		require.Empty(t, stored.Secrets)

		got, created, err = s.PutQueue(ctx, courier.Queue{Name: "fresh"})
		require.NoError(t, err)
		require.True(t, created)
		require.Empty(t, got.Secrets, "a new queue without secrets has none")
	})
}

// A queue is deleted only once it has no unfinished tasks; its finished ones go with it, and a
// task cannot be inserted into it afterwards.
func TestDeleteQueueRefusesUnfinishedWork(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, _, err := s.PutQueue(ctx, courier.Queue{Name: "old", ConcurrencyLimit: 2})
		require.NoError(t, err)
		_, _, err = s.InsertTask(ctx, courier.TaskRequest{TaskID: "t1", Version: 1, Queue: "old", Priority: 3, Payload: []byte(`{}`)})
		require.NoError(t, err)

		err = s.DeleteQueue(ctx, "old")
		require.Equal(t, courier.CodeConflict, courier.ErrorCode(err), "%v", err)
		var ce *courier.Error
		require.ErrorAs(t, err, &ce)
		require.EqualValues(t, 1, ce.Details["pending"])
		_, err = s.GetQueue(ctx, "old")
		require.NoError(t, err, "a refused delete leaves the queue")

		_, _, err = s.CancelTask(ctx, "t1", 1)
		require.NoError(t, err)
		require.NoError(t, s.DeleteQueue(ctx, "old"), "only finished tasks left")
		_, err = s.GetQueue(ctx, "old")
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err))
		_, err = s.GetTask(ctx, "t1", 1)
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err), "its finished tasks went with it")
		_, _, err = s.InsertTask(ctx, courier.TaskRequest{TaskID: "t2", Version: 1, Queue: "old", Priority: 3, Payload: []byte(`{}`)})
		require.Equal(t, courier.CodeValidation, courier.ErrorCode(err), "no task goes into a deleted queue")

		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(s.DeleteQueue(ctx, "old")), "a second delete finds nothing")
	})
}
