package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/lib/pq" // PostgreSQL driver

	"github.com/courier-oss/courier/schema"
	"github.com/courier-oss/courier/store"
)

// PostgresEnv names the variable holding the PostgreSQL URL tests use.
const PostgresEnv = "COURIER_TEST_POSTGRES_URL"

// PostgresURL returns a URL to a fresh, empty schema on the test PostgreSQL server, dropped when
// the test ends. Without COURIER_TEST_POSTGRES_URL (or if the server does not answer) the test is
// skipped, except in CI, where it fails.
func PostgresURL(t testing.TB) string {
	t.Helper()
	base := os.Getenv(PostgresEnv)
	if base == "" {
		unavailable(t, PostgresEnv+" is not set")
	}
	db, err := sql.Open("postgres", base)
	if err != nil {
		t.Fatalf("open %s: %v", PostgresEnv, err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		unavailable(t, "PostgreSQL at "+PostgresEnv+" does not answer: "+err.Error())
	}
	name := "t_" + randomHex(6)
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("postgres", base)
		if err != nil {
			return
		}
		defer db.Close()
		_, _ = db.Exec("DROP SCHEMA " + name + " CASCADE")
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", PostgresEnv, err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String()
}

func unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("PostgreSQL is required in CI: %s", why)
	}
	t.Skipf("skipping PostgreSQL test: %s (set %s, e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable)", why, PostgresEnv)
}

// SQLiteURL returns a URL to a fresh SQLite file in the test's temp dir.
func SQLiteURL(t testing.TB) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "courier.db")
}

// Dialects lists the databases every store test runs on.
var Dialects = []string{"sqlite", "postgres"}

// URL returns a fresh database URL for a dialect name from Dialects.
func URL(t testing.TB, dialect string) string {
	if dialect == "postgres" {
		return PostgresURL(t)
	}
	return SQLiteURL(t)
}

// Store opens a migrated store on a fresh database of the dialect, closed when the test ends.
func Store(t testing.TB, dialect string) (*store.Store, string) {
	t.Helper()
	dsn := URL(t, dialect)
	s, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if err := schema.Up(context.Background(), s.DB(), schema.AllSets...); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s, dsn
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
