package store

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/dialect/sqlitedialect"

	_ "github.com/lib/pq"  // PostgreSQL driver "postgres"
	_ "modernc.org/sqlite" // pure-Go SQLite driver "sqlite"
)

// Store wraps one database (courier's own, or a producer's that holds only the outbox table).
type Store struct {
	db  *bun.DB
	pg  bool
	url string // PostgreSQL only: for the connections that LISTEN

	watchMu sync.Mutex
	// bizTypeWatchers are told after every committed change of a business type (BizTypeCache).
	bizTypeWatchers map[int]func()
	nextWatcher     int

	notifier tasksNotifier // TasksChannel's notifications after commit (task_notify.go)
}

// PostgresMaxConns bounds a Store's PostgreSQL connections, busy and idle (the listeners of
// LISTEN/NOTIFY have their own).
const PostgresMaxConns = 20

// Open connects to a database by URL: postgres://… or postgresql://… for PostgreSQL,
// sqlite:PATH (or a bare path ending in .db) for SQLite. SQLite files get WAL, a busy timeout
// and immediate transactions, so concurrent writers in one process wait instead of failing.
func Open(ctx context.Context, databaseURL string) (*Store, error) {
	var (
		sqldb *sql.DB
		db    *bun.DB
		err   error
	)
	switch {
	case strings.HasPrefix(databaseURL, "postgres://"), strings.HasPrefix(databaseURL, "postgresql://"):
		sqldb, err = sql.Open("postgres", databaseURL)
		if err != nil {
			return nil, err
		}
		// Every connection may stay open while idle: with database/sql's default of 2 idle
		// connections, each burst of concurrent statements closed the connections beyond two
		// and opened new ones for the next (a backend process each), which cost the task bench
		// more CPU than all of courier's statements. Idle ones close after 5 minutes.
		sqldb.SetMaxOpenConns(PostgresMaxConns)
		sqldb.SetMaxIdleConns(PostgresMaxConns)
		sqldb.SetConnMaxIdleTime(5 * time.Minute)
		db = bun.NewDB(sqldb, pgdialect.New())
	case strings.HasPrefix(databaseURL, "sqlite:"), strings.HasSuffix(databaseURL, ".db"):
		path := strings.TrimPrefix(strings.TrimPrefix(databaseURL, "sqlite://"), "sqlite:")
		sqldb, err = sql.Open("sqlite", sqliteDSN(path))
		if err != nil {
			return nil, err
		}
		sqldb.SetMaxOpenConns(1)
		db = bun.NewDB(sqldb, sqlitedialect.New())
	default:
		return nil, fmt.Errorf("store: unsupported database URL %q (want postgres://… or sqlite:PATH)", redact(databaseURL))
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: connect %s: %w", redact(databaseURL), err)
	}
	s := &Store{db: db, pg: db.Dialect().Name() == dialect.PG}
	if s.pg {
		s.url = databaseURL
	}
	return s, nil
}

func sqliteDSN(path string) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(30000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Set("_txlock", "immediate")
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return "file:" + path + sep + q.Encode()
}

// redact hides a password in a URL so it never reaches logs or error messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// DB exposes the bun handle (for migrations and for tests).
func (s *Store) DB() *bun.DB { return s.db }

// IsPostgres reports whether the store runs on PostgreSQL.
func (s *Store) IsPostgres() bool { return s.pg }

// Close closes the connection pool.
func (s *Store) Close() error { return s.db.Close() }

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// nowSQL is the database's current time in the column layout of the dialect. Due times are
// always compared against the database clock, never a worker's.
func (s *Store) nowSQL() string {
	if s.pg {
		return "clock_timestamp()"
	}
	return "strftime('%Y-%m-%d %H:%M:%f+00:00', 'now')"
}

// sqliteTimeLayout is how nowSQL writes a time on SQLite (strftime's %f is milliseconds).
const sqliteTimeLayout = "2006-01-02 15:04:05.000+00:00"

// timeArg is t as a query argument that compares exactly with the times nowSQL writes: on
// SQLite, where times are text, in nowSQL's own layout (bun's layout drops trailing zeros, so
// an equal time would not compare equal).
func (s *Store) timeArg(t time.Time) any {
	if s.pg {
		return t.UTC()
	}
	return t.UTC().Format(sqliteTimeLayout)
}

// timeSQL is t as an SQL literal in the column layout of the dialect.
func (s *Store) timeSQL(t time.Time) string {
	if s.pg {
		return string(s.db.Dialect().AppendTime(nil, t.UTC()))
	}
	return "'" + t.UTC().Format(sqliteTimeLayout) + "'"
}

// nowPlusSQL is the database's current time plus d, in the column layout of the dialect.
func (s *Store) nowPlusSQL(d time.Duration) string {
	if s.pg {
		return fmt.Sprintf("(clock_timestamp() + make_interval(secs => %f))", d.Seconds())
	}
	return fmt.Sprintf("strftime('%%Y-%%m-%%d %%H:%%M:%%f+00:00', 'now', '%+f seconds')", d.Seconds())
}

// greatestSQL is the later of two timestamp expressions (text compares correctly on SQLite).
func (s *Store) greatestSQL(a, b string) string {
	if s.pg {
		return "GREATEST(" + a + ", " + b + ")"
	}
	return "MAX(" + a + ", " + b + ")"
}
