package schema_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/schema"
	"github.com/courier-oss/courier/store"
)

// Both dialects must ship the same migration versions, numbered 1..N with no gaps, each with an
// up and a down file.
func TestDialectsHaveSameVersionsWithoutGaps(t *testing.T) {
	for _, set := range schema.AllSets {
		pg, err := schema.Versions(set, "postgres")
		require.NoError(t, err)
		lite, err := schema.Versions(set, "sqlite")
		require.NoError(t, err)
		require.NotEmpty(t, pg, "set %s has no migrations", set)
		require.Equal(t, pg, lite, "set %s: PostgreSQL and SQLite versions differ", set)
		for i, v := range pg {
			require.Equal(t, i+1, v, "set %s: versions must run 1..N without gaps", set)
		}
		for _, dir := range []string{"postgres", "sqlite"} {
			fsys, err := schema.FS(set, dir)
			require.NoError(t, err)
			require.NoError(t, schema.CheckPairs(fsys), "set %s/%s", set, dir)
		}
	}
}

// Up, down and up again must work on both dialects, and Up is idempotent.
func TestUpDownUp(t *testing.T) {
	for _, dialect := range testenv.Dialects {
		t.Run(dialect, func(t *testing.T) {
			ctx := context.Background()
			s, err := store.Open(ctx, testenv.URL(t, dialect))
			require.NoError(t, err)
			defer s.Close()
			db := s.DB()
			require.NoError(t, schema.Up(ctx, db, schema.AllSets...))
			require.NoError(t, schema.Up(ctx, db, schema.AllSets...), "second Up must be a no-op")
			applied, err := schema.Applied(ctx, db, schema.Outbox)
			require.NoError(t, err)
			require.NotEmpty(t, applied)

			_, err = db.ExecContext(ctx, "SELECT count(*) FROM courier_outbox")
			require.NoError(t, err)
			for _, set := range []schema.Set{schema.Courier, schema.Outbox} {
				require.NoError(t, schema.Down(ctx, db, set))
			}
			_, err = db.ExecContext(ctx, "SELECT count(*) FROM courier_outbox")
			require.Error(t, err, "down must drop the outbox table")
			require.NoError(t, schema.Up(ctx, db, schema.AllSets...))
			_, err = db.ExecContext(ctx, "SELECT count(*) FROM courier_api_keys")
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, "SELECT count(*) FROM courier_tasks WHERE concurrency_key = '' AND status = 'pending'")
			require.NoError(t, err, "0013 adds the tasks' concurrency keys")
		})
	}
}
