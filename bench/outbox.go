package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/internal/defaults"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/mq/natsmq"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/worker"
)

// OutboxConfig sets up `courier bench outbox`.
type OutboxConfig struct {
	Rows        int           // rows committed per scenario; default 2000
	Rate        float64       // target commits per second; default 200
	PostgresURL string        // also run against this PostgreSQL database when set
	Timeout     time.Duration // per scenario; default 10 min
	Out         io.Writer     // where the table goes; default stdout
	// BatchRows and BatchRate size the batch-mode scenarios (courier-batch-sqlite,
	// courier-batch-postgres); BatchRows 0 skips them. Their rows are committed every 10 ms, as
	// many per transaction as the rate asks (at least one), so the producer side keeps up with
	// rates far above one transaction per row.
	BatchRows int
	BatchRate float64 // default 1,000 rows/s
	BatchMax  int     // records per batch (relay.BatchConfig.Max); default relay.DefaultBatchMax
	// Ordered adds the ordered-mode scenarios (courier-ordered-sqlite, courier-ordered-postgres):
	// Rows rows at Rate, one per transaction as in the per-record scenario, spread round-robin
	// over OrderedKeys keys (default 20), so the two compare in one run.
	Ordered     bool
	OrderedKeys int
	// River runs the River reference (bench/river.go) beside the batch mode, before its
	// scenarios, on PostgresURL's server: a queue that reads a table and runs a no-op, against
	// a relay that reads a table and publishes. Dir "" or BatchRows 0 skips it.
	River RiverConfig
}

// OutboxRun is what one `courier bench outbox` run measured.
type OutboxRun struct {
	Results []Result
	River   *RiverResult // River's burn-down beside the batch mode; nil: not asked for
}

// Scenario modes of runOutbox.
const (
	modeRecord  = ""        // one workflow per record, the default
	modeBatch   = "batch"   // the batch mode
	modeOrdered = "ordered" // the ordered mode: one delivery per key
)

// Result is one row of the table.
type Result struct {
	Scenario   string
	Key        string // the scenario's stable name in --json output (bare, courier-sqlite, …)
	N          int
	Elapsed    time.Duration
	Throughput float64 // completed per second, from the first commit to the last arrival (courier per record: or to its last run closed, if later)
	P50, P99   time.Duration
	Max        time.Duration
	Cost       Cost // history events and billable actions per record
	// CPU is what the scenario spent while its records went out (bench/cpu.go): from the
	// first commit (or bare's first start) to its last completion or, for courier per record,
	// until every delivery run had closed. Not measured for the batch mode.
	CPU cpuSpent
}

// Stack is the running Temporal server and NATS server a benchmark measures (cmd/courier
// starts the embedded ones; bench itself never imports the Temporal server).
type Stack struct {
	Temporal  client.Client
	NATSURL   string
	Namespace string // stack.Temporal's namespace; default "courier" (the embedded server's)
}

// namespace is s.Namespace or its default.
func (s Stack) namespace() string {
	if s.Namespace == "" {
		return "courier"
	}
	return s.Namespace
}

// RunOutbox runs the outbox scenarios and the bare-Temporal baseline on one stack, and River
// beside the batch mode when cfg.River names it.
func RunOutbox(ctx context.Context, stack Stack, cfg OutboxConfig) (OutboxRun, error) {
	defaults.UnlessPositive(&cfg.Rows, 2000)
	defaults.UnlessPositive(&cfg.Rate, 200)
	defaults.UnlessPositive(&cfg.Timeout, 10*time.Minute)
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	quiet := quietLogger()
	tc := stack.Temporal

	var results []Result
	var run OutboxRun
	base, err := runBaseline(ctx, tc, cfg)
	if err != nil {
		return run, fmt.Errorf("baseline: %w", err)
	}
	results = append(results, base)
	if cfg.BatchRows > 0 && cfg.River.Dir != "" {
		rc := cfg.River
		defaults.UnlessPositive(&rc.Jobs, cfg.BatchRows)
		rc.SteadyRate = 0 // the batch scenarios are burn-downs of a sort: rows at the batch rate
		run.River = RunRiver(ctx, cfg.PostgresURL, rc, cfg.Timeout)
	}

	defaults.UnlessPositive(&cfg.BatchRate, 1000)
	defaults.UnlessPositive(&cfg.OrderedKeys, 20)
	i := 0
	err = forEachDatabase(ctx, "courier-bench-", cfg.PostgresURL, func(name, url string) error {
		r, err := runOutbox(ctx, stack, name, url, fmt.Sprintf("BENCH%d", i), cfg, modeRecord, quiet)
		if err != nil {
			return fmt.Errorf("outbox on %s: %w", name, err)
		}
		i++
		results = append(results, r)
		if cfg.Ordered {
			// The same database again, with a source of its own (the per-record rows are sent).
			r, err = runOutbox(ctx, stack, name, url, fmt.Sprintf("BENCH%d", i), cfg, modeOrdered, quiet)
			if err != nil {
				return fmt.Errorf("outbox ordered mode on %s: %w", name, err)
			}
			i++
			results = append(results, r)
		}
		if cfg.BatchRows <= 0 {
			return nil
		}
		r, err = runOutbox(ctx, stack, name, url, fmt.Sprintf("BENCH%d", i), cfg, modeBatch, quiet)
		if err != nil {
			return fmt.Errorf("outbox batch mode on %s: %w", name, err)
		}
		i++
		results = append(results, r)
		return nil
	})
	run.Results = results
	if err != nil {
		return run, err
	}
	title := fmt.Sprintf("outbox: %d rows per scenario, target %.0f commits/s, one row per transaction", cfg.Rows, cfg.Rate)
	if cfg.Ordered {
		title += fmt.Sprintf("; ordered mode: the same, over %d keys", cfg.OrderedKeys)
	}
	if cfg.BatchRows > 0 {
		title += fmt.Sprintf("; batch mode: %d rows at %.0f rows/s, committed every 10 ms", cfg.BatchRows, cfg.BatchRate)
	}
	PrintTable(cfg.Out, title, results)
	printCost(cfg.Out, costRows(results, func(r Result) (string, Cost) { return r.Scenario, r.Cost }))
	printOutboxCPU(cfg.Out, results)
	printOutboxRiver(cfg.Out, run)
	return run, nil
}

// printOutboxRiver prints River's burn-down and the batch mode's rate over it, when River ran.
func printOutboxRiver(w io.Writer, run OutboxRun) {
	rv := run.River
	if rv == nil {
		return
	}
	if rv.Err != "" {
		fmt.Fprintf(w, "\nRiver (%s) not run: %s\n", rv.Command, rv.Err)
		return
	}
	fmt.Fprintf(w, "\nRiver burn-down (%s): %d no-op jobs, worked %.0f/s (bulk insert %.0f/s)\n", rv.Command, rv.N, rv.PerSec, rv.InsertPerSec)
	for _, ratio := range OutboxRatios(run) {
		fmt.Fprintf(w, "%s: %.2f\n", ratio.Name, ratio.Value)
	}
}

// OutboxRatios are the batch scenarios' rates over River's burn-down, where both were measured.
func OutboxRatios(run OutboxRun) []Ratio {
	rv := run.River
	if rv == nil || rv.Err != "" || rv.PerSec <= 0 {
		return nil
	}
	var out []Ratio
	for _, r := range run.Results {
		if strings.HasPrefix(r.Key, "courier-batch-") && r.Throughput > 0 {
			out = append(out, Ratio{Name: r.Key + "/river", Value: r.Throughput / rv.PerSec})
		}
	}
	return out
}

// runOutbox commits rows at the target rate and times each from its commit to its arrival at
// a JetStream consumer. Per record, the scenario's time ends when the last row has arrived and
// the last delivery run has closed; in batch mode, when the last row has arrived; in ordered
// mode, when the last row has arrived and the last key's delivery run has closed.
func runOutbox(ctx context.Context, stack Stack, dbName, dbURL, streamName string, cfg OutboxConfig, mode string, log *slog.Logger) (Result, error) {
	tc, natsURL := stack.Temporal, stack.NATSURL
	batch := mode == modeBatch
	rows, rate, key, scenario := cfg.Rows, cfg.Rate, "courier-"+dbName, "courier outbox, "+dbName
	switch mode {
	case modeBatch:
		rows, rate, key, scenario = cfg.BatchRows, cfg.BatchRate, "courier-batch-"+dbName, "courier outbox batch mode, "+dbName
	case modeOrdered:
		key, scenario = "courier-ordered-"+dbName, fmt.Sprintf("courier outbox ordered mode (%d keys), %s", cfg.OrderedKeys, dbName)
	}
	st, err := openDB(ctx, dbURL)
	if err != nil {
		return Result{}, err
	}
	defer st.Close()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return Result{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return Result{}, err
	}
	subject := "bench." + key
	stream, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: streamName, Subjects: []string{subject}, Storage: jetstream.FileStorage})
	if err != nil {
		return Result{}, err
	}
	pub, err := natsmq.Dial(natsURL, "courier-bench")
	if err != nil {
		return Result{}, err
	}
	defer pub.Close()
	source := "bench-" + key
	rcfg := relay.Config{TaskQueue: "bench-" + key, PollInterval: 100 * time.Millisecond, StartWorkers: relay.EmbeddedStartWorkers}
	switch mode {
	case modeBatch:
		rcfg.Batch = relay.BatchConfig{Sources: []string{source}, Max: cfg.BatchMax}
	case modeOrdered:
		rcfg.Ordered = relay.OrderedConfig{Sources: []string{source}}
	}
	w, err := worker.Start(ctx, worker.Config{Relay: rcfg}, worker.Deps{
		Temporal: tc, Publisher: pub, Logger: log,
		// A source name per scenario keeps workflow ids apart from earlier scenarios on the
		// same server (outbox/<source>/<id>).
		Sources: []relay.Source{{Name: source, Store: st}},
	})
	if err != nil {
		return Result{}, err
	}
	defer w.Stop()

	var (
		mu          sync.Mutex
		workflowIDs = make([]string, 0, rows)
		committed   = make(map[string]time.Time, rows)
		arrived     = make(map[string]time.Time, rows)
		done        = make(chan struct{})
	)
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return Result{}, err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		id := m.Headers().Get(mq.HeaderMessageID)
		if _, dup := arrived[id]; !dup {
			arrived[id] = now
			if len(arrived) == rows {
				close(done)
			}
		}
	})
	if err != nil {
		return Result{}, err
	}
	defer cc.Stop()

	// The batch scenario reuses the per-record scenario's database: count only its own rows.
	before, err := st.OutboxStats(ctx)
	if err != nil {
		return Result{}, err
	}
	sentBefore := before.ByStatus[courier.OutboxSent]

	// One row per transaction at the rate. In batch mode producers (one per 2,000 rows/s
	// offered, as one connection inserting row by row keeps up with about that many) each commit
	// a transaction every 10 ms with as many rows as their share of the rate asks.
	producers, perTx, interval := 1, 1, time.Duration(float64(time.Second)/rate)
	if batch {
		producers = max(1, int(math.Ceil(rate/2000)))
		perTx = max(1, int(rate/float64(producers)/100))
		interval = time.Duration(float64(time.Second) * float64(perTx*producers) / rate)
	}
	onPostgres := st.IsPostgres()
	start, running := time.Now(), markCPU(onPostgres)
	payload := []byte(`{"bench":true}`)
	produce := func(rows int) error {
		msgs := make([]outbox.Message, perTx)
		for i := range msgs {
			msgs[i] = outbox.Message{Topic: subject, Payload: payload}
		}
		for i, tick := 0, 0; i < rows; tick++ {
			if d := time.Until(start.Add(time.Duration(tick) * interval)); d > 0 {
				time.Sleep(d)
			}
			n := min(perTx, rows-i)
			if mode == modeOrdered {
				for j := range msgs[:n] {
					msgs[j].Key = fmt.Sprintf("key-%d", (i+j)%cfg.OrderedKeys)
				}
			}
			tx, err := st.DB().BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			ids, err := outbox.Enqueue(ctx, tx, msgs[:n]...)
			if err != nil {
				_ = tx.Rollback()
				return err
			}
			if err := tx.Commit(); err != nil {
				return err
			}
			at := time.Now()
			mu.Lock()
			for _, id := range ids {
				committed[courier.OutboxMessageID(source, id)] = at
			}
			if mode == modeRecord {
				workflowIDs = append(workflowIDs, courier.OutboxWorkflowID(source, ids[0]))
			}
			mu.Unlock()
			i += n
		}
		return nil
	}
	perr := make(chan error, producers)
	for p := range producers {
		share := rows / producers
		if p < rows%producers {
			share++
		}
		go func() { perr <- produce(share) }()
	}
	for range producers {
		if err := <-perr; err != nil {
			return Result{}, err
		}
	}
	select {
	case <-done:
	case <-time.After(cfg.Timeout):
		mu.Lock()
		n := len(arrived)
		mu.Unlock()
		stats, _ := st.OutboxStats(ctx)
		return Result{}, fmt.Errorf("only %d of %d rows arrived within %s (rows by status: %v)", n, rows, cfg.Timeout, stats.ByStatus)
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	// Let the last deliveries mark their rows sent before the worker stops.
	for {
		st, err := st.OutboxStats(ctx)
		if err != nil {
			return Result{}, err
		}
		if st.ByStatus[courier.OutboxSent] == sentBefore+int64(rows) {
			break
		}
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	var (
		cost   Cost
		cpu    cpuSpent
		closed time.Time // per record: when the last delivery run closed (bench/runs.go)
	)
	if batch {
		cost, err = batchCost(ctx, tc, source, rows)
	} else if mode == modeOrdered {
		if err = waitRunsClosed(ctx, tc, stack.namespace(), courier.KindOutboxKey.Workflow); err == nil {
			cpu = running.until(markCPU(onPostgres))
			cost, err = orderedCost(ctx, tc, source, rows)
		}
	} else if err = waitRunsClosed(ctx, tc, stack.namespace(), courier.KindOutbox.Workflow); err == nil {
		cpu = running.until(markCPU(onPostgres))
		if closed, err = lastClose(ctx, tc, workflowIDs); err == nil {
			cost, err = measureCost(ctx, tc, workflowIDs)
		}
	}
	if err != nil {
		return Result{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	var lat []time.Duration
	last := later(start, closed)
	for id, at := range arrived {
		c, ok := committed[id]
		if !ok {
			return Result{}, fmt.Errorf("message %s arrived but was never committed", id)
		}
		lat = append(lat, at.Sub(c))
		if at.After(last) {
			last = at
		}
	}
	r := summarize(scenario, lat, last.Sub(start))
	r.Key, r.Cost, r.CPU = key, cost, cpu
	return r, nil
}

const (
	baselineWorkflow = "bench-noop-workflow"
	baselineActivity = "bench-noop-activity"
)

// runBaseline starts workflows with one no-op activity at the same rate on the same server,
// timing each from its start call to its close as the server recorded it (not to the return of
// its result, which a missed long-poll wake-up can hold back by the engine's 20 s poll expiry).
func runBaseline(ctx context.Context, tc client.Client, cfg OutboxConfig) (Result, error) {
	const queue = "bench-baseline"
	w := sdkworker.New(tc, queue, sdkworker.Options{MaxConcurrentWorkflowTaskPollers: 8, MaxConcurrentActivityTaskPollers: 8})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
		return workflow.ExecuteActivity(ctx, baselineActivity).Get(ctx, nil)
	}, workflow.RegisterOptions{Name: baselineWorkflow})
	w.RegisterActivityWithOptions(func(context.Context) error { return nil }, activity.RegisterOptions{Name: baselineActivity})
	if err := w.Start(); err != nil {
		return Result{}, err
	}
	defer w.Stop()

	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	start, running := time.Now(), markCPU(false)
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	ids := make([]string, 0, cfg.Rows)
	startedAt := make([]time.Time, 0, cfg.Rows)
	for i := 0; i < cfg.Rows; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		id := fmt.Sprintf("bench-baseline-%d-%d", start.UnixNano(), i)
		ids, startedAt = append(ids, id), append(startedAt, time.Now())
		run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, baselineWorkflow)
		if err != nil {
			return Result{}, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run.Get(ctx, nil); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	cpu := running.until(markCPU(false))
	if len(errs) > 0 {
		return Result{}, errors.Join(errs...)
	}
	closed, err := closeTimes(ctx, tc, ids)
	if err != nil {
		return Result{}, err
	}
	lat := make([]time.Duration, len(ids))
	var last time.Time
	for i, at := range closed {
		lat[i], last = at.Sub(startedAt[i]), later(last, at)
	}
	cost, err := measureCost(ctx, tc, ids)
	if err != nil {
		return Result{}, err
	}
	r := summarize("bare Temporal, 1 no-op activity", lat, last.Sub(start))
	r.Key, r.Cost, r.CPU = "bare", cost, cpu
	return r, nil
}

func summarize(name string, lat []time.Duration, elapsed time.Duration) Result {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pick := func(q float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		i := int(q * float64(len(lat)-1))
		return lat[i]
	}
	r := Result{Scenario: name, N: len(lat), Elapsed: elapsed}
	if elapsed > 0 {
		r.Throughput = float64(len(lat)) / elapsed.Seconds()
	}
	r.P50, r.P99, r.Max = pick(0.50), pick(0.99), pick(1)
	return r
}

// PrintTable prints results as a Markdown table.
func PrintTable(w io.Writer, title string, rs []Result) {
	fmt.Fprintf(w, "\n%s\n\n", title)
	fmt.Fprintln(w, "| scenario | n | elapsed | throughput/s | p50 | p99 | max |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		fmt.Fprintf(w, "| %s | %d | %.1fs | %.1f | %s | %s | %s |\n", r.Scenario, r.N, r.Elapsed.Seconds(), r.Throughput,
			r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond), r.Max.Round(time.Millisecond))
	}
	if len(rs) > 1 && rs[0].Throughput > 0 {
		fmt.Fprintln(w)
		for _, r := range rs[1:] {
			fmt.Fprintf(w, "%s: %.0f%% of the bare-Temporal throughput, p50 %.1fx the baseline's\n", r.Scenario,
				100*r.Throughput/rs[0].Throughput, float64(r.P50)/float64(max(rs[0].P50, 1)))
		}
	}
}

// printOutboxCPU prints each scenario's CPU per record, where measured: the run is CPU-bound
// once the engine is saturated, so a scenario that spends more per record delivers fewer.
func printOutboxCPU(w io.Writer, rs []Result) {
	first := true
	for _, r := range rs {
		line := r.CPU.describe("record", r.N)
		if line == "" || r.Elapsed <= 0 {
			continue
		}
		if first {
			fmt.Fprintln(w)
			first = false
		}
		fmt.Fprintf(w, "%s: %s; this process used %.0f%% of one core\n", r.Scenario, line, 100*r.CPU.Self.Seconds()/r.Elapsed.Seconds())
	}
}

// scratchSchema creates a throwaway schema in the given PostgreSQL database, so the benchmark
// never touches existing tables, and returns a URL that uses it.
func scratchSchema(ctx context.Context, base string) (string, func(), error) {
	db, err := sql.Open("postgres", base)
	if err != nil {
		return "", nil, err
	}
	name := fmt.Sprintf("courier_bench_%d", time.Now().UnixNano())
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+name); err != nil {
		db.Close()
		return "", nil, fmt.Errorf("create scratch schema: %w", err)
	}
	u, err := url.Parse(base)
	if err != nil {
		db.Close()
		return "", nil, err
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String(), func() {
		_, _ = db.Exec("DROP SCHEMA " + name + " CASCADE")
		db.Close()
	}, nil
}
