package store_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/store"
)

// Bursts of concurrent statements reuse the pool's connections: none is closed for being one
// idle connection too many and opened again for the next burst (a PostgreSQL backend process
// each time).
func TestPostgresPoolKeepsItsConnections(t *testing.T) {
	s, _ := testenv.Store(t, "postgres")
	for range 3 {
		var wg sync.WaitGroup
		for range store.PostgresMaxConns {
			wg.Go(func() {
				_, err := s.DB().ExecContext(t.Context(), "SELECT pg_sleep(0.02)")
				assert.NoError(t, err)
			})
		}
		wg.Wait()
	}
	st := s.DB().Stats()
	require.Zero(t, st.MaxIdleClosed, "connections closed for exceeding the idle limit")
	require.LessOrEqual(t, st.OpenConnections, store.PostgresMaxConns)
	require.Greater(t, st.OpenConnections, 2, "the burst's connections stay open")
}
