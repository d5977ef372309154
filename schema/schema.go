package schema

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"
	"github.com/uptrace/bun/migrate"
)

//go:embed outbox courier
var files embed.FS

// Set names a group of migrations tracked in its own bookkeeping table.
type Set string

// The migration sets. Courier's own database gets both; a producer's database gets Outbox.
const (
	Outbox  Set = "outbox"
	Courier Set = "courier"
)

// AllSets lists the sets in the order they are applied to courier's own database.
var AllSets = []Set{Outbox, Courier}

// DialectDir returns the folder name for a bun dialect, or an error for an unsupported one.
func DialectDir(name dialect.Name) (string, error) {
	switch name {
	case dialect.PG:
		return "postgres", nil
	case dialect.SQLite:
		return "sqlite", nil
	}
	return "", fmt.Errorf("schema: unsupported dialect %s", name)
}

// FS returns the migration files of one set for one dialect folder ("postgres" or "sqlite").
func FS(set Set, dir string) (fs.FS, error) {
	return fs.Sub(files, string(set)+"/"+dir)
}

// Versions lists the migration versions of one set and dialect folder in ascending order.
func Versions(set Set, dir string) ([]int, error) {
	sub, err := FS(set, dir)
	if err != nil {
		return nil, err
	}
	entries, err := fs.ReadDir(sub, ".")
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		if !ok {
			return nil, fmt.Errorf("schema: %s/%s/%s: name must be NNNN_description.up.sql", set, dir, e.Name())
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("schema: %s/%s/%s: %w", set, dir, e.Name(), err)
		}
		seen[v] = true
	}
	out := make([]int, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Ints(out)
	return out, nil
}

func migrator(db *bun.DB, set Set) (*migrate.Migrator, error) {
	dir, err := DialectDir(db.Dialect().Name())
	if err != nil {
		return nil, err
	}
	sub, err := FS(set, dir)
	if err != nil {
		return nil, err
	}
	ms := migrate.NewMigrations()
	if err := ms.Discover(sub); err != nil {
		return nil, err
	}
	return migrate.NewMigrator(db, ms,
		migrate.WithTableName("courier_schema_"+string(set)),
		migrate.WithMarkAppliedOnSuccess(true),
	), nil
}

// Up applies every pending migration of the given sets, in order. It is safe to run on every
// start and from several processes: on PostgreSQL a session advisory lock serialises concurrent
// runs (released by the server if the process dies, unlike a lock row); SQLite runs are
// serialised by its single writer.
func Up(ctx context.Context, db *bun.DB, sets ...Set) error {
	if db.Dialect().Name() == dialect.PG {
		conn, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(?)", advisoryKey); err != nil {
			return fmt.Errorf("schema: lock: %w", err)
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(?)", advisoryKey) //nolint:errcheck // the lock also ends with the session
	}
	for _, set := range sets {
		m, err := migrator(db, set)
		if err != nil {
			return err
		}
		if err := m.Init(ctx); err != nil {
			return fmt.Errorf("schema %s: init: %w", set, err)
		}
		if _, err := m.Migrate(ctx); err != nil {
			return fmt.Errorf("schema %s: %w", set, err)
		}
	}
	return nil
}

// advisoryKey is the PostgreSQL advisory lock id courier's migrations hold ("courier" in ASCII).
const advisoryKey int64 = 0x636f7572696572

// Down rolls back the most recently applied group of migrations of one set.
func Down(ctx context.Context, db *bun.DB, set Set) error {
	m, err := migrator(db, set)
	if err != nil {
		return err
	}
	if err := m.Init(ctx); err != nil {
		return err
	}
	_, err = m.Rollback(ctx)
	return err
}

// Applied lists the applied migration names of one set.
func Applied(ctx context.Context, db *bun.DB, set Set) ([]string, error) {
	m, err := migrator(db, set)
	if err != nil {
		return nil, err
	}
	if err := m.Init(ctx); err != nil {
		return nil, err
	}
	ms, err := m.MigrationsWithStatus(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, mg := range ms.Applied() {
		out = append(out, mg.Name)
	}
	return out, nil
}

// CheckPairs verifies every migration in fsys has both an up and a down file.
func CheckPairs(fsys fs.FS) error {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return err
	}
	ups, downs := map[string]bool{}, map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		base, _, _ := strings.Cut(name, ".")
		switch {
		case strings.HasSuffix(name, ".up.sql"):
			ups[base] = true
		case strings.HasSuffix(name, ".down.sql"):
			downs[base] = true
		default:
			return fmt.Errorf("unexpected file %s", name)
		}
	}
	for b := range ups {
		if !downs[b] {
			return fmt.Errorf("migration %s has no down file", b)
		}
	}
	for b := range downs {
		if !ups[b] {
			return fmt.Errorf("migration %s has no up file", b)
		}
	}
	return nil
}
