package bench

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// RiverConfig runs the River reference (a Go + PostgreSQL job queue, ../shared/peers/riverbench)
// beside courier's batched mode, in the same run and on the same PostgreSQL server.
type RiverConfig struct {
	Dir        string  // the riverbench module; "": River is not run
	Jobs       int     // burn-down jobs (-n)
	SteadyRate float64 // jobs per second of its steady run for 10 s (-rate); 0: none
}

// RiverResult is what riverbench printed, or why it could not run (Err).
type RiverResult struct {
	Command      string // how it was run, for the table
	N            int
	PerSec       float64 // burn-down: jobs worked per second
	InsertPerSec float64 // its bulk insert's rate
	SteadyRate   int
	SteadyP50    time.Duration // steady run: insert → work
	SteadyP99    time.Duration
	Err          string // set when River could not run; the other scenarios stand
}

// riverDatabasePrefix names the database each riverbench run works in: one of its own, created
// before the run and dropped after it, since riverbench works River's default queue until it has
// worked as many jobs as it inserted, and two runs sharing a database (benches of two checkouts
// on one server) take each other's jobs and never finish.
const riverDatabasePrefix = "river_bench_"

var (
	riverBurnDown = regexp.MustCompile(`river burn-down: inserted (\d+) in \S+ \(([\d.]+)/s\), worked in \S+ \(([\d.]+)/s\)`)
	riverSteady   = regexp.MustCompile(`river steady (\d+)/s for 10s: insert→work p50 (\S+) p99 (\S+)`)
)

// RunRiver runs riverbench (`go run .` in cfg.Dir) in a database of its own on the server pgURL
// names (created for the run, dropped after it) with 1,000 workers and a 20 ms fetch cooldown, its
// quickest settings here, and reads its figures. It never fails: what went wrong is in Err.
func RunRiver(ctx context.Context, pgURL string, cfg RiverConfig, timeout time.Duration) *RiverResult {
	args := []string{"run", ".", "-n", strconv.Itoa(cfg.Jobs), "-workers", "1000", "-cooldown", "20ms"}
	if cfg.SteadyRate > 0 {
		args = append(args, "-rate", strconv.Itoa(int(cfg.SteadyRate)))
	}
	r := &RiverResult{Command: "go " + strings.Join(args, " "), N: cfg.Jobs}
	if pgURL == "" {
		r.Err = "River needs PostgreSQL: give --postgres-url"
		return r
	}
	dsn, drop, err := riverDSN(ctx, pgURL)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer drop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append(args, "-dsn", dsn)...)
	cmd.Dir = cfg.Dir
	// go run leaves the riverbench process behind when it is killed; without a bound, Run would
	// wait for that orphan's output pipes forever.
	cmd.WaitDelay = 10 * time.Second
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		r.Err = fmt.Sprintf("%v: %s", err, lastLine(errOut.String()))
		return r
	}
	m := riverBurnDown.FindStringSubmatch(out.String())
	if m == nil {
		r.Err = "no burn-down line in its output: " + lastLine(out.String())
		return r
	}
	r.N, _ = strconv.Atoi(m[1])
	r.InsertPerSec, _ = strconv.ParseFloat(m[2], 64)
	r.PerSec, _ = strconv.ParseFloat(m[3], 64)
	if m := riverSteady.FindStringSubmatch(out.String()); m != nil {
		r.SteadyRate, _ = strconv.Atoi(m[1])
		r.SteadyP50, _ = time.ParseDuration(m[2])
		r.SteadyP99, _ = time.ParseDuration(m[3])
	}
	return r
}

// riverDSN is pgURL's server with a fresh database of the run's own; drop removes it.
func riverDSN(ctx context.Context, pgURL string) (dsn string, drop func(), err error) {
	u, err := url.Parse(pgURL)
	if err != nil {
		return "", nil, err
	}
	db, err := sql.Open("postgres", pgURL)
	if err != nil {
		return "", nil, err
	}
	name := fmt.Sprintf("%s%d", riverDatabasePrefix, time.Now().UnixNano())
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		db.Close()
		return "", nil, fmt.Errorf("create the %s database: %w", name, err)
	}
	drop = func() {
		_, _ = db.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
		db.Close()
	}
	u.Path = "/" + name
	q := u.Query()
	q.Del("search_path")
	u.RawQuery = q.Encode()
	return u.String(), drop, nil
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) == 0 {
		return ""
	}
	return strings.TrimSpace(lines[len(lines)-1])
}
