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

// The database riverbench works in, created on the PostgreSQL server when missing.
const riverDatabase = "river"

var (
	riverBurnDown = regexp.MustCompile(`river burn-down: inserted (\d+) in \S+ \(([\d.]+)/s\), worked in \S+ \(([\d.]+)/s\)`)
	riverSteady   = regexp.MustCompile(`river steady (\d+)/s for 10s: insert→work p50 (\S+) p99 (\S+)`)
)

// RunRiver runs riverbench (`go run .` in cfg.Dir) against the river database of the server
// pgURL names (created if missing) with 1,000 workers and a 20 ms fetch cooldown, its
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
	dsn, err := riverDSN(ctx, pgURL)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append(args, "-dsn", dsn)...)
	cmd.Dir = cfg.Dir
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

// riverDSN is pgURL's server with the river database, which it creates when missing.
func riverDSN(ctx context.Context, pgURL string) (string, error) {
	u, err := url.Parse(pgURL)
	if err != nil {
		return "", err
	}
	db, err := sql.Open("postgres", pgURL)
	if err != nil {
		return "", err
	}
	defer db.Close()
	var exists bool
	if err := db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", riverDatabase).Scan(&exists); err != nil {
		return "", fmt.Errorf("look for the %s database: %w", riverDatabase, err)
	}
	if !exists {
		if _, err := db.ExecContext(ctx, "CREATE DATABASE "+riverDatabase); err != nil && !strings.Contains(err.Error(), "already exists") {
			return "", fmt.Errorf("create the %s database: %w", riverDatabase, err)
		}
	}
	u.Path = "/" + riverDatabase
	q := u.Query()
	q.Del("search_path")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) == 0 {
		return ""
	}
	return strings.TrimSpace(lines[len(lines)-1])
}
