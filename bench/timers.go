package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/internal/defaults"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/timers"
	"github.com/courier-oss/courier/webhook"
)

// TimersConfig sets up `courier bench timers`.
type TimersConfig struct {
	Timers int           // timers per scenario; default 1000
	Window time.Duration // fire times spread across this window; default 10 s
	Lead   time.Duration // first fire time this long after creation starts; default 15 s
	Out    io.Writer
}

// TimerResult is one scenario's row.
type TimerResult struct {
	Scenario      string
	Key           string // stable name in --json output: bare, courier
	N             int
	CreatePerSec  float64
	P50, P99, Max time.Duration // lateness: arrival minus fire time
	Early         int
	HeapMB        float64
	Cost          Cost // history events and billable actions per timer
}

// RunTimers creates timers due across a window and measures how late (never early) they
// arrive, next to a bare-Temporal baseline: workflows that sleep until the same times and run
// one no-op activity.
func RunTimers(ctx context.Context, stack Stack, cfg TimersConfig) ([]TimerResult, error) {
	defaults.UnlessPositive(&cfg.Timers, 1000)
	defaults.UnlessPositive(&cfg.Window, 10*time.Second)
	defaults.UnlessPositive(&cfg.Lead, 15*time.Second)
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	sqlite, remove, err := scratchSQLite("courier-bench-timers-")
	if err != nil {
		return nil, err
	}
	defer remove()
	base, err := timerBaseline(ctx, stack.Temporal, cfg)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	st, err := openDB(ctx, sqlite)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	secret, _ := webhook.GenerateSecret()
	var (
		mu      sync.Mutex
		arrived = map[string]time.Time{}
		done    = make(chan struct{})
	)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var cb api.TimerCallback
		_ = json.NewDecoder(r.Body).Decode(&cb)
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if _, dup := arrived[cb.BizID]; !dup {
			arrived[cb.BizID] = now
			if len(arrived) == cfg.Timers {
				close(done)
			}
		}
	}))
	defer rcv.Close()
	if _, _, err := st.PutBizType(ctx, courier.BizType{Name: "bench.timer", Delivery: courier.DeliveryHTTP, CallbackURL: rcv.URL, Secrets: []string{secret}}); err != nil {
		return nil, err
	}
	stop, err := startTimerWorker(ctx, stack, st, nopPublisher{}, "bench-timers")
	if err != nil {
		return nil, err
	}
	defer stop()
	svc := timers.New(stack.Temporal, "", st, st, "bench-timers")

	start := time.Now()
	first := start.Add(cfg.Lead)
	due := make(map[string]time.Time, cfg.Timers)
	for i := 0; i < cfg.Timers; i++ {
		id := fmt.Sprintf("b-%d-%d", start.UnixNano(), i)
		at := first.Add(time.Duration(i) * cfg.Window / time.Duration(cfg.Timers))
		due[id] = at.Truncate(time.Millisecond)
		if _, _, err := svc.Create(ctx, api.TimerRequest{BizType: "bench.timer", BizID: id, When: api.At(at)}); err != nil {
			return nil, err
		}
	}
	createRate := float64(cfg.Timers) / time.Since(start).Seconds()
	select {
	case <-done:
	case <-time.After(cfg.Lead + cfg.Window + 5*time.Minute):
		return nil, fmt.Errorf("only %d of %d timers arrived", len(arrived), cfg.Timers)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	mu.Lock()
	res := lateness("courier timers (signed HTTP callback)", arrived, due, createRate)
	mu.Unlock()
	res.Key = "courier"
	ids := make([]string, 0, len(due))
	for id := range due {
		ids = append(ids, courier.TimerWorkflowID("bench.timer", id))
	}
	sort.Strings(ids)
	if res.Cost, err = measureCost(ctx, stack.Temporal, ids); err != nil {
		return nil, err
	}
	out := []TimerResult{base, res}
	printTimers(cfg.Out, fmt.Sprintf("timers: %d per scenario, due across %s starting %s after creation began", cfg.Timers, cfg.Window, cfg.Lead), out)
	return out, nil
}

// printTimers prints the timer scenarios' table under its title, then what they cost the engine.
func printTimers(w io.Writer, title string, out []TimerResult) {
	fmt.Fprintf(w, "\n%s\n\n", title)
	fmt.Fprintln(w, "| scenario | n | created/s | lateness p50 | p99 | max | early | Go heap in use |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, t := range out {
		fmt.Fprintf(w, "| %s | %d | %.0f | %s | %s | %s | %d | %.0f MB |\n", t.Scenario, t.N, t.CreatePerSec,
			t.P50.Round(time.Millisecond), t.P99.Round(time.Millisecond), t.Max.Round(time.Millisecond), t.Early, t.HeapMB)
	}
	printCost(w, costRows(out, func(r TimerResult) (string, Cost) { return r.Scenario, r.Cost }))
}

// lateness summarises arrival minus due time per id and counts early arrivals.
func lateness(name string, arrived, due map[string]time.Time, createRate float64) TimerResult {
	var late []time.Duration
	early := 0
	for id, at := range arrived {
		d := at.Sub(due[id])
		if d < 0 {
			early++
		}
		late = append(late, d)
	}
	r := summarize(name, late, 0)
	return TimerResult{Scenario: name, N: r.N, CreatePerSec: createRate, P50: r.P50, P99: r.P99, Max: r.Max, Early: early, HeapMB: heapMB()}
}

func heapMB() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapInuse) / (1 << 20)
}

const (
	timerBaseWorkflow = "bench-sleep-workflow"
	timerBaseActivity = "bench-sleep-activity"
)

// timerBaseline: workflows that sleep until their due time, then run one activity that reports
// its own start time.
func timerBaseline(ctx context.Context, tc client.Client, cfg TimersConfig) (TimerResult, error) {
	const queue = "bench-timer-baseline"
	var (
		mu      sync.Mutex
		arrived = map[string]time.Time{}
	)
	w := sdkworker.New(tc, queue, sdkworker.Options{MaxConcurrentWorkflowTaskPollers: 8, MaxConcurrentActivityTaskPollers: 8})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, id string, at time.Time) error {
		if d := at.Sub(workflow.Now(ctx)); d > 0 {
			if err := workflow.Sleep(ctx, d); err != nil {
				return err
			}
		}
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
		return workflow.ExecuteActivity(ctx, timerBaseActivity, id).Get(ctx, nil)
	}, workflow.RegisterOptions{Name: timerBaseWorkflow})
	w.RegisterActivityWithOptions(func(_ context.Context, id string) error {
		mu.Lock()
		arrived[id] = time.Now()
		mu.Unlock()
		return nil
	}, activity.RegisterOptions{Name: timerBaseActivity})
	if err := w.Start(); err != nil {
		return TimerResult{}, err
	}
	defer w.Stop()
	start := time.Now()
	first := start.Add(cfg.Lead)
	due := map[string]time.Time{}
	var runs []client.WorkflowRun
	for i := 0; i < cfg.Timers; i++ {
		id := fmt.Sprintf("base-%d-%d", start.UnixNano(), i)
		at := first.Add(time.Duration(i) * cfg.Window / time.Duration(cfg.Timers))
		due[id] = at
		run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, timerBaseWorkflow, id, at)
		if err != nil {
			return TimerResult{}, err
		}
		runs = append(runs, run)
	}
	createRate := float64(cfg.Timers) / time.Since(start).Seconds()
	for _, r := range runs {
		if err := r.Get(ctx, nil); err != nil {
			return TimerResult{}, err
		}
	}
	r := lateness("bare Temporal: sleep + 1 no-op activity", arrived, due, createRate)
	r.Key = "bare"
	ids := make([]string, 0, len(due))
	for id := range due {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var err error
	if r.Cost, err = measureCost(ctx, tc, ids); err != nil {
		return TimerResult{}, err
	}
	return r, nil
}

// nopPublisher stands in for the MQ in the timer benchmark, which delivers by HTTP only.
type nopPublisher struct{}

func (nopPublisher) Publish(context.Context, mq.Message) error { return nil }
func (nopPublisher) Ping(context.Context) error                { return nil }
func (nopPublisher) Close() error                              { return nil }
