package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A process's name and CPU time are read from its stat line as proc(5) lays it out, also when
// the name itself holds spaces and parentheses.
func TestParseProcStat(t *testing.T) {
	t.Parallel()
	name, cpu, ok := parseProcStat("4242 (postgres) S 1 4242 4242 0 -1 4194560 812 0 0 0 250 75 0 0 20 0 1 0 1500 223000000 4000 18446744073709551615\n")
	require.True(t, ok)
	require.Equal(t, "postgres", name)
	require.Equal(t, 3250*time.Millisecond, cpu, "utime 250 + stime 75 ticks of 10 ms")

	name, cpu, ok = parseProcStat("77 (my (odd) name) R 1 77 77 0 -1 0 0 0 0 0 4 6 0 0 20 0 1 0 9")
	require.True(t, ok)
	require.Equal(t, "my (odd) name", name)
	require.Equal(t, 100*time.Millisecond, cpu)

	for _, bad := range []string{"", "12 postgres S 1", "12 (postgres) S 1 2 3", "12 (postgres) S 1 2 3 4 5 6 7 8 9 10 x 7 0"} {
		_, _, ok := parseProcStat(bad)
		require.False(t, ok, "%q", bad)
	}
}

// The PostgreSQL server's CPU is the sum over its processes only; without any, or without a
// readable proc, it is not measured.
func TestPostgresCPU(t *testing.T) {
	t.Parallel()
	proc := t.TempDir()
	write := func(pid, stat string) {
		require.NoError(t, os.MkdirAll(filepath.Join(proc, pid), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(proc, pid, "stat"), []byte(stat), 0o644))
	}
	write("10", "10 (postgres) S 1 10 10 0 -1 0 0 0 0 0 100 20 0 0 20 0 1 0 5")
	write("11", "11 (postgres) S 10 10 10 0 -1 0 0 0 0 0 30 0 0 0 20 0 1 0 6")
	write("12", "12 (nats-server) S 1 12 12 0 -1 0 0 0 0 0 900 900 0 0 20 0 1 0 7")
	write("self", "10 (postgres) S 1 10 10 0 -1 0 0 0 0 0 100 20 0 0 20 0 1 0 5")
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "13"), 0o755)) // a process that ended meanwhile

	cpu, ok := postgresCPU(proc)
	require.True(t, ok)
	require.Equal(t, 1500*time.Millisecond, cpu, "(100+20+30) ticks of the two postgres processes")

	_, ok = postgresCPU(filepath.Join(proc, "12"))
	require.False(t, ok, "no postgres process")
	_, ok = postgresCPU(filepath.Join(proc, "missing"))
	require.False(t, ok, "no proc")
}

// With a Temporal cluster on the machine, its server processes and the PostgreSQL server that
// serves it (cluster_name temporal) count as the engine, not as PostgreSQL.
func TestScanCPUSplitsTheEngine(t *testing.T) {
	proc := t.TempDir()
	write := func(pid, stat, cmdline string) {
		require.NoError(t, os.MkdirAll(filepath.Join(proc, pid), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(proc, pid, "stat"), []byte(stat), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(proc, pid, "cmdline"), []byte(cmdline), 0o644))
	}
	write("20", "20 (temporal-server) S 1 20 20 0 -1 0 0 0 0 0 400 100 0 0 20 0 1 0 5", "temporal-server\x00start\x00--service\x00history\x00")
	write("21", "21 (postgres) S 1 21 21 0 -1 0 0 0 0 0 10 10 0 0 20 0 1 0 5", "/usr/lib/postgresql/15/bin/postgres\x00-D\x00/x\x00-c\x00cluster_name=temporal\x00")
	write("22", "22 (postgres) S 21 21 21 0 -1 0 0 0 0 0 60 20 0 0 20 0 1 0 5", "postgres: temporal: postgres temporal 127.0.0.1(5000) idle")
	write("23", "23 (postgres) S 1 23 23 0 -1 0 0 0 0 0 5 5 0 0 20 0 1 0 5", "/usr/lib/postgresql/15/bin/postgres\x00-D\x00/y\x00-c\x00cluster_name=courier\x00")
	write("24", "24 (postgres) S 23 23 23 0 -1 0 0 0 0 0 30 0 0 0 20 0 1 0 5", "postgres: courier: postgres courier 127.0.0.1(5001) idle")
	pg, engine := scanCPU(proc)
	require.Equal(t, cpuSum{cpu: 400 * time.Millisecond, found: true}, pg, "courier's PostgreSQL: (5+5+30) ticks")
	require.Equal(t, cpuSum{cpu: 6000 * time.Millisecond, found: true}, engine, "temporal-server and Temporal's PostgreSQL: (500+20+80) ticks")
}

// This process's clock moves while it works, and a mark reads PostgreSQL only when asked.
func TestMarkCPU(t *testing.T) {
	t.Parallel()
	start := markCPU(false)
	require.False(t, start.postgresOK)
	deadline := time.Now().Add(10 * time.Second)
	x := 0
	for processCPU() <= start.self && time.Now().Before(deadline) {
		for i := range 1_000_000 {
			x += i
		}
	}
	spent := start.until(markCPU(false))
	require.Positive(t, spent.Self, "no CPU counted after working (%d)", x)
	require.Zero(t, spent.Postgres)

	var garbage [][]byte
	gcBefore := gcCPU()
	for range 5 {
		for range 1000 {
			garbage = append(garbage, make([]byte, 64<<10))
		}
		garbage = garbage[:0]
		runtime.GC()
	}
	require.Greater(t, gcCPU(), gcBefore, "collections spent no CPU the runtime counts")
}

// The outbox's CPU lines name each measured scenario's CPU per record, its garbage collector's
// share and PostgreSQL's, and the process's CPU use over the scenario's time.
func TestPrintOutboxCPU(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	printOutboxCPU(&b, []Result{
		{Scenario: "bare", N: 100, Elapsed: 2 * time.Second, CPU: cpuSpent{Self: 1600 * time.Millisecond, GC: 50 * time.Millisecond}},
		{Scenario: "courier outbox, postgres", N: 100, Elapsed: 2 * time.Second, CPU: cpuSpent{Self: 3400 * time.Millisecond, Postgres: 100 * time.Millisecond}},
		{Scenario: "courier outbox batch mode, sqlite", N: 100, Elapsed: time.Second},
	})
	require.Equal(t, "\nbare: CPU per record 16.0 ms in this process (0.5 ms of it collecting garbage); this process used 80% of one core\n"+
		"courier outbox, postgres: CPU per record 34.0 ms in this process and 1.0 ms in PostgreSQL; this process used 170% of one core\n", b.String())

	b.Reset()
	printOutboxCPU(&b, []Result{{Scenario: "courier outbox batch mode, sqlite", N: 100, Elapsed: time.Second}})
	require.Empty(t, b.String(), "nothing measured, nothing printed")
}

// The CPU lines name each scenario's CPU per task, bare's starts, and what one start per task
// leaves of the bare rate.
func TestPrintTaskCPU(t *testing.T) {
	t.Parallel()
	bare := TaskResult{Scenario: "bare", Key: "bare", N: 100, CPU: cpuSpent{Self: 1200 * time.Millisecond}, StartCPU: 300 * time.Millisecond}
	c, ok := startCeiling(bare)
	require.True(t, ok)
	require.InDelta(t, 0.8, c, 1e-9, "12 ms per task against 12 + 3 ms")
	pg := TaskResult{Scenario: "courier tasks, postgres", Key: "courier-postgres", N: 100,
		CPU: cpuSpent{Self: 1500 * time.Millisecond, Postgres: 250 * time.Millisecond}}
	_, ok = startCeiling(pg)
	require.False(t, ok, "only the bare scenario has a ceiling")

	var b bytes.Buffer
	printTaskCPU(&b, []TaskResult{bare, pg, {Scenario: "unmeasured", N: 100}})
	require.Equal(t, "bare: CPU per task 12.0 ms in this process; starting its workflow, before the run, cost 3.0 ms more\n"+
		"courier tasks, postgres: CPU per task 15.0 ms in this process and 2.5 ms in PostgreSQL\n"+
		"courier's claimer starts each task's run inside the measured time, bare starts its workflows before it: at bare's CPU per task plus one start, and the same CPU use, a run reaches 80% of the bare rate\n",
		b.String())
}
