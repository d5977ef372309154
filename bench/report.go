package bench

import (
	"encoding/json"

	"fmt"
	"github.com/courier-oss/courier"
	"io"
	"time"
)

// Report is the machine-readable form of one benchmark run (`courier bench … --json`): exactly
// one JSON object on stdout.
type Report struct {
	Kind string      `json:"kind"` // outbox, tasks or timers
	Rows []ReportRow `json:"rows"`
	// Ratios compare scenarios of the run (tasks: each batched burn-down's rate over River's
	// and over the per-attempt mode's on the same database; outbox: each batch scenario's rate
	// over River's burn-down).
	Ratios []Ratio `json:"ratios,omitempty"`
	// Notes say what could not be measured, and why (tasks, outbox: River not run).
	Notes []string `json:"notes,omitempty"`
}

// ReportRow is one scenario. Scenario names are stable: bare, courier-sqlite,
// courier-postgres (outbox, tasks), standalone (tasks --standalone), courier-batch-sqlite,
// courier-batch-postgres and river (outbox batch mode), courier-batched-sqlite[-steady],
// courier-batched-postgres[-steady] and river (tasks' batched mode) and bare, courier (timers).
type ReportRow struct {
	Scenario       string  `json:"scenario"`
	N              int     `json:"n"`
	ThroughputPerS float64 `json:"throughput_per_s"` // outbox: delivered/s; tasks: completed/s; timers: created/s
	P50Ms          float64 `json:"p50_ms"`           // outbox: commit→publish; tasks: insert→push; timers: lateness
	P99Ms          float64 `json:"p99_ms"`
	MaxMs          float64 `json:"max_ms"`
	// HistoryEventsPerItem and ActionsPerItem are read back from a sample of the scenario's
	// workflow histories.
	HistoryEventsPerItem float64 `json:"history_events_per_item"`
	ActionsPerItem       float64 `json:"actions_per_item"`
	Early                int     `json:"early"` // timers only: deliveries before their fire time
	// Schedules only: the schedules run, the (schedule, fire time) pairs due in the window, of
	// those the ones never delivered and the ones delivered as two different triggers; N is
	// the pairs delivered, throughput_per_s triggers per second over the window.
	Schedules int    `json:"schedules,omitempty"`
	Expected  int    `json:"expected,omitempty"`
	Missed    *int   `json:"missed,omitempty"`
	Doubled   *int   `json:"doubled,omitempty"`
	Note      string `json:"note,omitempty"`
	// Where measured (tasks; outbox bare and per record): CPU per item while the items ran, in
	// the bench's process (the engine and courier) and in the PostgreSQL server; tasks only:
	// for bare, its workflow starts' CPU per task, spent before its run.
	CPUMsPerItem         float64 `json:"cpu_ms_per_item,omitempty"`
	GCCPUMsPerItem       float64 `json:"gc_cpu_ms_per_item,omitempty"` // of cpu_ms_per_item, the Go garbage collector's
	PostgresCPUMsPerItem float64 `json:"postgres_cpu_ms_per_item,omitempty"`
	StartCPUMsPerItem    float64 `json:"start_cpu_ms_per_item,omitempty"`
	// EngineCPUMsPerItem is the Temporal server's processes' CPU per item, when the bench runs
	// against a Temporal cluster on this machine (courier bench --temporal-address).
	EngineCPUMsPerItem float64 `json:"engine_cpu_ms_per_item,omitempty"`

	// Tasks' batched mode and River only. Load is burn-down (the backlog inserted before the
	// work starts) or steady (inserted at InsertPerS while it runs); throughput_per_s is then
	// end to end, insert → push → result → Success; p50/p99 are insert → push, and the
	// push_to_success ones from the push's arrival at the worker to its result's answer.
	Mode               string  `json:"mode,omitempty"` // per-attempt, batched or river
	Load               string  `json:"load,omitempty"`
	InsertPerS         float64 `json:"insert_per_s,omitempty"`
	PushToSuccessP50Ms float64 `json:"push_to_success_p50_ms,omitempty"`
	PushToSuccessP99Ms float64 `json:"push_to_success_p99_ms,omitempty"`
	Limit              int     `json:"limit,omitempty"`
	// MaxHeld is the most tasks the worker held at once; Lost the tasks not Success at the
	// end; OverLimit how far MaxHeld went past the limit. Set (0 included) where measured.
	MaxHeld   *int `json:"max_held,omitempty"`
	Lost      *int `json:"lost,omitempty"`
	OverLimit *int `json:"over_limit,omitempty"`
	Batches   int  `json:"batch_runs,omitempty"` // batch runs that pushed the scenario's tasks
	Pushes    int  `json:"pushes,omitempty"`     // push requests the worker took
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// WriteJSON writes r as one JSON object and a newline.
func WriteJSON(w io.Writer, r Report) error {
	return json.NewEncoder(w).Encode(r)
}

// OutboxReport converts an outbox run: its scenarios, River's burn-down beside the batch mode
// and the batch mode's rate over River's.
func OutboxReport(run OutboxRun) Report {
	out := reportOf("outbox", run.Results, func(r Result) ReportRow {
		row := rowOf(r.Key, r.N, r.Throughput, r.P50, r.P99, r.Max, r.Cost)
		row.setCPU(r.CPU, r.N)
		return row
	})
	if rv := run.River; rv != nil {
		if rv.Err != "" {
			out.Notes = append(out.Notes, "river not run: "+rv.Err)
		} else {
			out.Rows = append(out.Rows, riverRow(rv))
		}
	}
	out.Ratios = OutboxRatios(run)
	return out
}

// riverRow is River's burn-down as a row.
func riverRow(rv *RiverResult) ReportRow {
	return ReportRow{Scenario: "river", Mode: "river", Load: LoadBurnDown, N: rv.N, ThroughputPerS: rv.PerSec, InsertPerS: rv.InsertPerSec}
}

// TasksReport converts a task run: the per-attempt scenarios, the batched ones and River's.
func TasksReport(run TasksRun) Report {
	out := reportOf("tasks", run.PerAttempt, func(r TaskResult) ReportRow {
		row := rowOf(r.Key, r.N, r.PerSec, r.P50, r.P99, r.Max, r.Cost)
		row.setCPU(r.CPU, r.N)
		if r.Key == "bare" || r.Key == "standalone" {
			row.StartCPUMsPerItem = ms(perItem(r.StartCPU, r.N))
		}
		return row
	})
	for _, r := range run.Batched {
		row := rowOf(r.Key, r.N, r.PerSec, r.InsertToPush.P50, r.InsertToPush.P99, r.InsertToPush.Max, r.Cost)
		row.setCPU(r.CPU, r.N)
		row.Mode, row.Load, row.InsertPerS, row.Limit = string(courier.DispatchBatched), r.Load, r.InsertPerSec, r.Limit
		row.PushToSuccessP50Ms, row.PushToSuccessP99Ms = ms(r.PushToSuccess.P50), ms(r.PushToSuccess.P99)
		row.MaxHeld, row.Lost, row.OverLimit = &r.MaxHeld, &r.Lost, &r.OverLimit
		row.Batches, row.Pushes = r.Batches, r.Pushes
		out.Rows = append(out.Rows, row)
	}
	if rv := run.River; rv != nil {
		if rv.Err != "" {
			out.Notes = append(out.Notes, "river not run: "+rv.Err)
		} else {
			out.Rows = append(out.Rows, riverRow(rv))
			if rv.SteadyRate > 0 {
				out.Rows = append(out.Rows, ReportRow{Scenario: "river-steady", Mode: "river", Load: LoadSteady, N: rv.SteadyRate * 10,
					InsertPerS: float64(rv.SteadyRate), P50Ms: ms(rv.SteadyP50), P99Ms: ms(rv.SteadyP99)})
			}
		}
	}
	out.Ratios = Ratios(run.Batched, run.River, run.PerAttempt)
	return out
}

// setCPU fills the row's CPU per item from what n items spent.
func (row *ReportRow) setCPU(c cpuSpent, n int) {
	row.CPUMsPerItem = ms(perItem(c.Self, n))
	row.GCCPUMsPerItem = ms(perItem(c.GC, n))
	row.PostgresCPUMsPerItem = ms(perItem(c.Postgres, n))
	row.EngineCPUMsPerItem = ms(perItem(c.Engine, n))
}

// TimersReport converts timer results.
func TimersReport(rs []TimerResult) Report {
	return reportOf("timers", rs, func(r TimerResult) ReportRow {
		row := rowOf(r.Key, r.N, r.CreatePerSec, r.P50, r.P99, r.Max, r.Cost)
		row.Early = r.Early
		return row
	})
}

// reportOf converts one kind's results, a row each; no results is an empty list, not null.
func reportOf[T any](kind string, rs []T, row func(T) ReportRow) Report {
	out := Report{Kind: kind, Rows: make([]ReportRow, 0, len(rs))}
	for _, r := range rs {
		out.Rows = append(out.Rows, row(r))
	}
	return out
}

// rowOf is a scenario's row from what every kind of result measures.
func rowOf(scenario string, n int, perSec float64, p50, p99, worst time.Duration, c Cost) ReportRow {
	return ReportRow{Scenario: scenario, N: n, ThroughputPerS: perSec, P50Ms: ms(p50), P99Ms: ms(p99), MaxMs: ms(worst),
		HistoryEventsPerItem: c.Events, ActionsPerItem: c.Actions}
}

type costRow struct {
	scenario string
	cost     Cost
}

func costRows[T any](rs []T, f func(T) (string, Cost)) []costRow {
	out := make([]costRow, 0, len(rs))
	for _, r := range rs {
		name, c := f(r)
		out = append(out, costRow{name, c})
	}
	return out
}

// printCost prints what each scenario's items cost the engine, next to the first (bare) row.
func printCost(w io.Writer, rows []costRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\n| scenario | history events/item | billable actions/item | histories read |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %d |\n", r.scenario, costPerItem(r.cost.Events), costPerItem(r.cost.Actions), r.cost.Sampled)
	}
}

// costPerItem prints a cost per item with the digits it needs: one decimal for a workflow per item,
// three significant ones for a fraction of an event (a bucketed timer's share of its bucket).
func costPerItem(v float64) string {
	if v >= 1 || v == 0 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
