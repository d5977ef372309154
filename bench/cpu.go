package bench

import (
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// cpuMark is the CPU time spent so far by this process (the engine, courier and the bench's
// own producers and HTTP workers, all in one process) and by the PostgreSQL server's processes
// on this machine. CPU per item is what a CPU-bound run divides the machine by: a scenario that
// spends more of it per item completes fewer items per second on the same cores.
type cpuMark struct {
	self, gc, postgres time.Duration
	postgresOK         bool // read, and found: false for a scenario without PostgreSQL, or where its processes cannot be read (not Linux, or not local)
	// engine is the CPU of the machine's Temporal server processes (temporal-server: a
	// cluster on this machine, when the bench runs against an external Temporal); engineOK is
	// false when there are none (the embedded engine, whose CPU is in self).
	engine   time.Duration
	engineOK bool
}

// markCPU reads this process's clock now, and the PostgreSQL server's when the scenario runs
// on PostgreSQL.
func markCPU(postgres bool) cpuMark {
	m := cpuMark{self: processCPU(), gc: gcCPU()}
	pg, engine := scanCPU("/proc")
	if postgres {
		m.postgres, m.postgresOK = pg.cpu, pg.found
	}
	m.engine, m.engineOK = engine.cpu, engine.found
	return m
}

// cpuSpent is the CPU spent between two marks.
type cpuSpent struct {
	Self     time.Duration // this process
	GC       time.Duration // of Self, the Go garbage collector's share (an estimate of the runtime's)
	Postgres time.Duration // the PostgreSQL server's processes; 0 when not measured
	Engine   time.Duration // the Temporal server's processes on this machine (an external engine); 0 when none
}

func (m cpuMark) until(end cpuMark) cpuSpent {
	s := cpuSpent{Self: end.self - m.self, GC: end.gc - m.gc}
	if m.postgresOK && end.postgresOK {
		s.Postgres = end.postgres - m.postgres
	}
	if m.engineOK && end.engineOK {
		s.Engine = end.engine - m.engine
	}
	return s
}

// describe says what s is per item ("CPU per task 16.7 ms in this process and 1.6 ms in
// PostgreSQL"), or "" when nothing was measured.
func (s cpuSpent) describe(item string, n int) string {
	if s.Self <= 0 {
		return ""
	}
	out := fmt.Sprintf("CPU per %s %s in this process", item, msString(perItem(s.Self, n)))
	if s.GC > 0 {
		out += fmt.Sprintf(" (%s of it collecting garbage)", msString(perItem(s.GC, n)))
	}
	if s.Engine > 0 {
		out += fmt.Sprintf(", %s in the Temporal cluster (its services and its PostgreSQL)", msString(perItem(s.Engine, n)))
	}
	if s.Postgres > 0 {
		out += fmt.Sprintf(" and %s in PostgreSQL", msString(perItem(s.Postgres, n)))
	}
	return out
}

// perItem is a duration spread over n items.
func perItem(d time.Duration, n int) time.Duration {
	if n <= 0 {
		return 0
	}
	return d / time.Duration(n)
}

// gcCPU is the CPU the Go garbage collector has spent in this process so far, as the runtime
// estimates it (runtime/metrics).
func gcCPU() time.Duration {
	sample := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return time.Duration(sample[0].Value.Float64() * float64(time.Second))
}

// clockTick is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// postgresCPU sums the user and system CPU time of every process named "postgres" under proc
// (the postmaster, its backends and its writers) that does not serve a Temporal cluster on
// this machine (see scanCPU). ok is false when proc cannot be read or has no such process. A
// backend that exited is counted in its parent's waited-for children, which this leaves out:
// the pool keeps its connections for the whole run.
func postgresCPU(proc string) (time.Duration, bool) {
	pg, _ := scanCPU(proc)
	return pg.cpu, pg.found
}

// engineProcess is the name Temporal's server runs under (make cluster builds it as
// temporal-server; the temporalio/server image names it so too).
const engineProcess = "temporal-server"

// temporalPostgres is the cluster_name of the PostgreSQL server make cluster runs for
// Temporal: its processes' titles start with "postgres: temporal: ", its postmaster's command
// line sets cluster_name=temporal.
const temporalPostgres = "temporal"

// cpuSum is the CPU of a set of processes, and whether there were any.
type cpuSum struct {
	cpu   time.Duration
	found bool
}

func (c *cpuSum) add(d time.Duration) { c.cpu, c.found = c.cpu+d, true }

// scanCPU reads every process under proc once and sums, by user plus system CPU time, the
// PostgreSQL servers' processes (postgres) and the Temporal engine's (engine: every
// temporal-server process and the PostgreSQL server that serves Temporal, when the bench runs
// against a cluster on this machine; the embedded engine is in the bench's own process).
func scanCPU(proc string) (postgres, engine cpuSum) {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return postgres, engine
	}
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		dir := proc + "/" + e.Name()
		b, err := os.ReadFile(dir + "/stat")
		if err != nil {
			continue // the process ended meanwhile
		}
		name, cpu, ok := parseProcStat(string(b))
		switch {
		case !ok:
		case name == engineProcess:
			engine.add(cpu)
		case name == "postgres":
			cmdline, _ := os.ReadFile(dir + "/cmdline")
			if servesTemporal(string(cmdline)) {
				engine.add(cpu)
			} else {
				postgres.add(cpu)
			}
		}
	}
	return postgres, engine
}

// servesTemporal tells a process of Temporal's PostgreSQL server by its command line (its
// arguments separated by NUL bytes): the postmaster's sets cluster_name, the others' title
// names it.
func servesTemporal(cmdline string) bool {
	if strings.HasPrefix(cmdline, "postgres: "+temporalPostgres+": ") {
		return true
	}
	for _, arg := range strings.Split(cmdline, "\x00") {
		if arg == "cluster_name="+temporalPostgres {
			return true
		}
	}
	return false
}

// parseProcStat reads a process's name and its user plus system CPU time from the contents of
// its /proc/<pid>/stat (proc(5): the name in parentheses is field 2, utime and stime are
// fields 14 and 15).
func parseProcStat(stat string) (name string, cpu time.Duration, ok bool) {
	open, end := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return "", 0, false
	}
	fields := strings.Fields(stat[end+1:]) // from field 3 (state) on
	if len(fields) < 13 {
		return "", 0, false
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, false
	}
	return stat[open+1 : end], time.Duration(utime+stime) * clockTick, true
}
