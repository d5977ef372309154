package cluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/lib/pq" // PostgreSQL driver
)

// ErrPrerequisite marks what the machine lacks to run the topology (PostgreSQL's server
// binaries, the postgres user, the Go toolchain). Tests skip on it outside CI.
var ErrPrerequisite = errors.New("missing prerequisite")

// PostgresBinDir finds PostgreSQL's server binaries (initdb, postgres): $COURIER_PG_BINDIR,
// the newest /usr/lib/postgresql/*/bin (Debian, Ubuntu), or `pg_config --bindir`.
func PostgresBinDir() (string, error) {
	var candidates []string
	if d := os.Getenv("COURIER_PG_BINDIR"); d != "" {
		candidates = append(candidates, d)
	}
	debian, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(debian, func(i, j int) bool { return pgMajor(debian[i]) > pgMajor(debian[j]) })
	candidates = append(candidates, debian...)
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	for _, d := range candidates {
		if fileExists(filepath.Join(d, "initdb")) && fileExists(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w: PostgreSQL's initdb and postgres binaries (Debian: apt-get install postgresql; or set COURIER_PG_BINDIR)", ErrPrerequisite)
}

// pgMajor reads the major version out of /usr/lib/postgresql/<major>/bin.
func pgMajor(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Postgres is a private PostgreSQL instance: its own data directory, port and process. Trust
// authentication for the superuser postgres, on 127.0.0.1 and a Unix socket in its directory.
type Postgres struct {
	Proc *Proc
	Host string
	Port int
	dir  string
}

// postgresConfig sets up one instance.
type postgresConfig struct {
	name           string // for logs: postgres-temporal, postgres-app
	clusterName    string // PostgreSQL's cluster_name, in every process's title: temporal, courier
	dir            string // holds data/ and the socket; created if missing
	binDir         string
	host           string
	port           int
	maxConnections int
	logDir         string
}

// startPostgres initialises the data directory on first use (initdb) and starts the server,
// returning once it accepts connections. As root, initdb and the server run as the postgres
// user (PostgreSQL refuses to run as root), so dir and its parents must let that user in.
func startPostgres(ctx context.Context, cfg postgresConfig) (*Postgres, error) {
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.dir, 0o700); err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(cfg.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
		if err := reachable(cfg.dir); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(cfg.dir, "data")
	if !fileExists(filepath.Join(data, "PG_VERSION")) {
		// --no-sync: a throwaway cluster need not wait for initdb's files to reach the disk;
		// the running server still syncs every commit (fsync stays on).
		cmd := exec.CommandContext(ctx, filepath.Join(cfg.binDir, "initdb"), "-D", data, "-A", "trust", "-U", "postgres",
			"-E", "UTF8", "--locale=C", "--no-sync")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = cfg.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s: initdb: %w\n%s", cfg.name, err, out)
		}
	}
	pg := &Postgres{Host: cfg.host, Port: cfg.port, dir: cfg.dir}
	pg.Proc = &Proc{
		Name: cfg.name,
		path: filepath.Join(cfg.binDir, "postgres"),
		args: []string{"-D", data, "-p", strconv.Itoa(cfg.port),
			"-c", "listen_addresses=" + cfg.host,
			"-c", "unix_socket_directories=" + cfg.dir,
			"-c", "max_connections=" + strconv.Itoa(cfg.maxConnections),
			// In each process's title ("postgres: temporal: checkpointer"), so the bench
			// (bench/cpu.go) can tell Temporal's database from courier's.
			"-c", "cluster_name=" + cfg.clusterName,
		},
		env:     []string{"LC_ALL=C", "PATH=/usr/bin:/bin"},
		cred:    cred,
		logPath: filepath.Join(cfg.logDir, cfg.name+".log"),
		// SIGINT is PostgreSQL's fast shutdown: roll back open transactions, checkpoint, exit.
		stopSig: syscall.SIGINT,
	}
	if err := pg.Start(ctx); err != nil {
		return nil, err
	}
	return pg, nil
}

// StartPrivatePostgres starts a PostgreSQL server of its own for a test that must restart it
// (the machine's shared server is never touched): its data under dir (initdb on first use; dir
// and every parent must be searchable by others when we are root, as the server then runs as
// the postgres user), listening on DefaultHost and a free port, its log at dir/name.log, and
// name as its cluster_name. It returns once the server accepts connections; Proc.Stop ends it
// and Restart restarts it in immediate mode. An error wrapping ErrPrerequisite says what the
// machine lacks (PostgreSQL's server binaries, the postgres user).
func StartPrivatePostgres(ctx context.Context, dir, name string) (*Postgres, error) {
	binDir, err := PostgresBinDir()
	if err != nil {
		return nil, err
	}
	if _, err := postgresCredential(); err != nil {
		return nil, err
	}
	ports := &portPicker{host: DefaultHost}
	port := ports.free()
	if err := ports.err(); err != nil {
		return nil, err
	}
	return startPostgres(ctx, postgresConfig{name: name, clusterName: name, dir: dir, binDir: binDir,
		host: DefaultHost, port: port, maxConnections: 200, logDir: dir})
}

// Start starts the server process and waits until it accepts connections.
func (pg *Postgres) Start(ctx context.Context) error {
	if err := pg.Proc.Start(); err != nil {
		return err
	}
	return pg.WaitReady(ctx, time.Minute)
}

// WaitReady waits until the server answers a query, failing at once if it exits.
func (pg *Postgres) WaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	db, err := sql.Open("postgres", pg.URL("postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	var lastErr error
	for {
		if lastErr = db.PingContext(ctx); lastErr == nil {
			return nil
		}
		select {
		case <-pg.Proc.Done():
			return fmt.Errorf("%s exited while starting (see %s): %v", pg.Proc.Name, pg.Proc.LogPath(), pg.Proc.ExitErr())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w", pg.Proc.Name, errors.Join(ctx.Err(), lastErr))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Restart stops the server in immediate mode (SIGQUIT: every backend ends at once, no
// checkpoint, so the next start replays the write-ahead log as after a crash) and starts it
// again on the same port and data.
func (pg *Postgres) Restart(ctx context.Context) error {
	if err := pg.Proc.Signal(syscall.SIGQUIT); err != nil {
		return err
	}
	select {
	case <-pg.Proc.Done():
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s did not stop within 30s of SIGQUIT", pg.Proc.Name)
	}
	return pg.Start(ctx)
}

// URL is a lib/pq URL of database db on this instance.
func (pg *Postgres) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", net.JoinHostPort(pg.Host, strconv.Itoa(pg.Port)), db)
}

// CreateDatabase creates db unless it exists, and tells whether it did.
func (pg *Postgres) CreateDatabase(ctx context.Context, db string) (bool, error) {
	conn, err := sql.Open("postgres", pg.URL("postgres"))
	if err != nil {
		return false, err
	}
	defer conn.Close()
	var exists bool
	if err := conn.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&exists); err != nil {
		return false, err
	}
	if exists {
		return false, nil
	}
	_, err = conn.ExecContext(ctx, `CREATE DATABASE "`+db+`"`)
	return err == nil, err
}

// postgresCredential is nil when we may run PostgreSQL as ourselves, and the postgres user's
// when we are root.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("%w: running as root, PostgreSQL must run as the user postgres, which does not exist (%v)", ErrPrerequisite, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// reachable checks that every parent of dir lets others in (PostgreSQL runs as the postgres
// user and must reach its data directory).
func reachable(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("the postgres user cannot reach %s: %s is not searchable by others (chmod o+x, or choose another directory)", abs, d)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
