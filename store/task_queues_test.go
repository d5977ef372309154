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
