package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Report is the machine-readable form of one benchmark run (`courier bench … --json`): exactly
// one JSON object on stdout.
type Report struct {
	Kind string      `json:"kind"` // outbox, tasks or timers
	Rows []ReportRow `json:"rows"`
}

// ReportRow is one scenario. Scenario names are stable: bare, courier-sqlite,
// courier-postgres (outbox, tasks), courier-batch-sqlite, courier-batch-postgres (outbox batch
// mode) and bare, courier (timers).
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
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// WriteJSON writes r as one JSON object and a newline.
func WriteJSON(w io.Writer, r Report) error {
	return json.NewEncoder(w).Encode(r)
}

// OutboxReport converts outbox results.
func OutboxReport(rs []Result) Report {
	out := Report{Kind: "outbox", Rows: []ReportRow{}}
	for _, r := range rs {
		out.Rows = append(out.Rows, ReportRow{Scenario: r.Key, N: r.N, ThroughputPerS: r.Throughput,
			P50Ms: ms(r.P50), P99Ms: ms(r.P99), MaxMs: ms(r.Max), HistoryEventsPerItem: r.Cost.Events, ActionsPerItem: r.Cost.Actions})
	}
	return out
}

// TasksReport converts task results.
func TasksReport(rs []TaskResult) Report {
	out := Report{Kind: "tasks", Rows: []ReportRow{}}
	for _, r := range rs {
		out.Rows = append(out.Rows, ReportRow{Scenario: r.Key, N: r.N, ThroughputPerS: r.PerSec,
			P50Ms: ms(r.P50), P99Ms: ms(r.P99), MaxMs: ms(r.Max), HistoryEventsPerItem: r.Cost.Events, ActionsPerItem: r.Cost.Actions})
	}
	return out
}

// TimersReport converts timer results.
func TimersReport(rs []TimerResult) Report {
	out := Report{Kind: "timers", Rows: []ReportRow{}}
	for _, r := range rs {
		out.Rows = append(out.Rows, ReportRow{Scenario: r.Key, N: r.N, ThroughputPerS: r.CreatePerSec,
			P50Ms: ms(r.P50), P99Ms: ms(r.P99), MaxMs: ms(r.Max), HistoryEventsPerItem: r.Cost.Events, ActionsPerItem: r.Cost.Actions, Early: r.Early})
	}
	return out
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
		fmt.Fprintf(w, "| %s | %.1f | %.1f | %d |\n", r.scenario, r.cost.Events, r.cost.Actions, r.cost.Sampled)
	}
}
