package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/mq/natsmq"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/timers"
	"github.com/courier-oss/courier/webhook"
	"github.com/courier-oss/courier/worker"
)

// SchedulesConfig sets up `courier bench schedules`.
type SchedulesConfig struct {
	Schedules int           // wheel schedules per scenario; default 100,000
	Interval  time.Duration // every schedule's interval; default 10 s
	Duration  time.Duration // the measured window of fire times; default 60 s
	// TemporalSchedules is how many Temporal Schedules the baseline runs (each run a workflow);
	// default 100, 0 skips it.
	TemporalSchedules int
	PostgresURL       string // also run on this PostgreSQL database, in a throwaway schema
	SkipSQLite        bool   // run the wheel scenarios on PostgreSQL only
	// Zsetcron is the path of a built zsetcron binary (../shared/peers/zsetcron) run beside,
	// in both claim styles, with the same schedules and interval; empty skips it.
	Zsetcron string
	Out      io.Writer
}

// ScheduleResult is one scenario of `courier bench schedules`.
type ScheduleResult struct {
	Scenario      string
	Key           string
	Schedules     int
	Expected      int     // (schedule, fire time) pairs due in the window
	Triggers      int     // of those, delivered
	PerSec        float64 // Triggers over the window
	P50, P99, Max time.Duration
	Early         int // arrivals before their fire time
	Missed        int // pairs due in the window never delivered
	Doubled       int // pairs delivered as two different triggers (delivery ids)
	Cost          Cost
	Note          string
}

// RunSchedules measures cron triggers per second sustained over a window: wheel schedules of a
// bucketed business type (NATS and signed HTTP, SQLite and PostgreSQL), today's Temporal
// Schedules as the baseline, and zsetcron beside them.
func RunSchedules(ctx context.Context, stack Stack, cfg SchedulesConfig) ([]ScheduleResult, error) {
	if cfg.Schedules <= 0 {
		cfg.Schedules = 100_000
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 60 * time.Second
	}
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	var out []ScheduleResult
	i := 0
	baseline := cfg.TemporalSchedules > 0
	err := forEachDatabase(ctx, "courier-bench-schedules-", cfg.PostgresURL, func(name, url string) error {
		for _, delivery := range []string{courier.DeliveryMQ, courier.DeliveryHTTP} {
			if cfg.SkipSQLite && name == "sqlite" {
				break
			}
			r, err := runWheelSchedules(ctx, stack, cfg, name, url, delivery, i)
			if err != nil {
				return fmt.Errorf("wheel schedules (%s) on %s: %w", delivery, name, err)
			}
			i++
			out = append(out, r)
			fmt.Fprintf(cfg.Out, "%s: %d of %d triggers, %.0f/s, p99 %s\n", r.Scenario, r.Triggers, r.Expected, r.PerSec, r.P99.Round(time.Millisecond))
		}
		if baseline {
			baseline = false
			r, err := runTemporalSchedules(ctx, stack, cfg, url)
			if err != nil {
				return fmt.Errorf("temporal schedules: %w", err)
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return out, err
	}
	if cfg.Zsetcron != "" {
		for _, mode := range []string{"lua", "per-trigger"} {
			r, err := runZsetcron(ctx, cfg, mode)
			if err != nil {
				return out, fmt.Errorf("zsetcron %s: %w", mode, err)
			}
			out = append(out, r)
		}
	}
	fmt.Fprintf(cfg.Out, "\nschedules: interval %s, fire times measured over %s (after one interval of warm-up)\n\n", cfg.Interval, cfg.Duration)
	fmt.Fprintln(cfg.Out, "| scenario | schedules | triggers/s | lateness p50 | p99 | max | early | missed | doubled | events/trigger | actions/trigger |")
	fmt.Fprintln(cfg.Out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range out {
		fmt.Fprintf(cfg.Out, "| %s | %d | %.0f | %s | %s | %s | %d | %d | %d | %s | %s |\n", r.Scenario, r.Schedules, r.PerSec,
			r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond), r.Max.Round(time.Millisecond), r.Early, r.Missed, r.Doubled,
			costPerItem(r.Cost.Events), costPerItem(r.Cost.Actions))
	}
	return out, nil
}

// triggerArrivals records each trigger's arrivals by (schedule, nominal fire time).
type triggerArrivals struct {
	mu    sync.Mutex
	first map[string]time.Time           // key → first arrival
	fire  map[string]time.Time           // key → fire time (jitter included)
	ids   map[string]map[string]struct{} // key → delivery ids
	early int
}

func newTriggerArrivals() *triggerArrivals {
	return &triggerArrivals{first: map[string]time.Time{}, fire: map[string]time.Time{}, ids: map[string]map[string]struct{}{}}
}

func (a *triggerArrivals) record(body []byte, now time.Time) {
	var cb api.TimerCallback
	if json.Unmarshal(body, &cb) != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	k := cb.BizID
	if now.Before(cb.FireAt) {
		a.early++
	}
	if _, ok := a.first[k]; !ok {
		a.first[k], a.fire[k] = now, cb.FireAt
		a.ids[k] = map[string]struct{}{}
	}
	a.ids[k][cb.DeliveryID] = struct{}{}
}

// runWheelSchedules is one scenario: cfg.Schedules interval schedules of a bucketed type,
// jittered across the interval (interval fire times are multiples since the epoch: without
// jitter every schedule fires in the same second), delivered by delivery on one database.
func runWheelSchedules(ctx context.Context, stack Stack, cfg SchedulesConfig, dbName, dbURL, delivery string, n int) (ScheduleResult, error) {
	quiet := quietLogger()
	st, err := openDB(ctx, dbURL)
	if err != nil {
		return ScheduleResult{}, err
	}
	defer st.Close()
	bizType := fmt.Sprintf("bench.cron.%s.%d", delivery, n)
	got := newTriggerArrivals()
	b := courier.BizType{Name: bizType, Delivery: delivery, TimerMode: courier.TimerModeBucketed}
	closeTarget, err := timerTarget(ctx, stack, &b, fmt.Sprintf("BENCHCRON%d", n), "bench.cron."+fmt.Sprint(n), got.record)
	if err != nil {
		return ScheduleResult{}, err
	}
	defer closeTarget()
	if _, _, err := st.PutBizType(ctx, b); err != nil {
		return ScheduleResult{}, err
	}
	pub, err := natsmq.Dial(stack.NATSURL, "courier-bench")
	if err != nil {
		return ScheduleResult{}, err
	}
	defer pub.Close()
	queue := fmt.Sprintf("bench-cron-%d", n)
	stop, err := startTimerWorker(ctx, stack, st, pub, queue)
	if err != nil {
		return ScheduleResult{}, err
	}
	defer stop()
	svc := timers.New(stack.Temporal, stack.namespace(), st, st, queue)
	svc.Logger = quiet

	// Load the schedules in bulk (the API creates one per request), then arm their buckets.
	spec, _ := json.Marshal(api.ScheduleSpec{BizType: bizType, Interval: api.PositiveDuration(cfg.Interval), Jitter: api.Duration(cfg.Interval - time.Millisecond)})
	recs := make([]courier.ScheduleRecord, cfg.Schedules)
	for i := range recs {
		recs[i] = courier.ScheduleRecord{ID: fmt.Sprintf("%s-%d", bizType, i), BizType: bizType, CatchupWindow: time.Minute,
			Timing:  courier.ScheduleTiming{Interval: cfg.Interval, Jitter: cfg.Interval - time.Millisecond},
			Payload: []byte(`{"report":"tick"}`), Spec: spec}
	}
	loadStart := time.Now()
	refs, err := st.CreateScheduleRecords(ctx, recs, loadStart)
	if err != nil {
		return ScheduleResult{}, err
	}
	// The scenario's schedules stop with it: the next scenario on the same database must not
	// carry their triggers too.
	defer func() {
		stop := context.Background()
		_, _ = st.DB().NewRaw("DELETE FROM courier_schedules WHERE biz_type = ?", bizType).Exec(stop)
		_, _ = st.DB().NewRaw("UPDATE courier_timers SET state = 'cancelled' WHERE biz_type = ? AND state = 'scheduled'", bizType).Exec(stop)
	}()
	for _, ref := range refs {
		// A bucket whose start fails (the engine slow to answer on a loaded machine) is armed by
		// the sweep once it is overdue, as in the service.
		_ = svc.ArmBucket(ctx, ref.BizType, ref.Bucket)
	}
	// The window: nominal fire times from one interval after loading to Duration later.
	from := time.Now().Add(cfg.Interval).Truncate(cfg.Interval).Add(cfg.Interval)
	to := from.Add(cfg.Duration)
	// Wait for the window's last triggers, and up to a minute more while they still arrive.
	deadline := to.Add(cfg.Interval + 5*time.Second)
	for {
		select {
		case <-ctx.Done():
			return ScheduleResult{}, ctx.Err()
		case <-time.After(time.Until(deadline)):
		}
		if time.Now().After(to.Add(cfg.Interval + time.Minute)) {
			break
		}
		if inWindow(got, from, to) >= cfg.Schedules*int(cfg.Duration/cfg.Interval) {
			break
		}
		deadline = time.Now().Add(5 * time.Second)
	}
	res := summarizeTriggers(got, from, to, cfg.Schedules, cfg.Interval)
	res.Scenario = fmt.Sprintf("courier wheel, %s, %s", map[string]string{courier.DeliveryMQ: "NATS", courier.DeliveryHTTP: "signed HTTP"}[delivery], dbName)
	res.Key = fmt.Sprintf("wheel-%s-%s", delivery, dbName)
	got.mu.Lock()
	total := len(got.first)
	got.mu.Unlock()
	if res.Cost, err = bucketCost(ctx, stack, bizType, max(total, 1)); err != nil {
		// The triggers are measured; only the engine's cost is unknown (its histories could not
		// be read, as on a loaded machine where the reads time out).
		res.Note = "events and actions per trigger not read: " + err.Error()
	}
	return res, nil
}

// nominalOf is a trigger's nominal fire time, from its biz_id (<id>@<time>).
func nominalOf(bizID string) (time.Time, bool) {
	i := strings.LastIndexByte(bizID, '@')
	if i < 0 {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, bizID[i+1:])
	return t, err == nil
}

func inWindow(got *triggerArrivals, from, to time.Time) int {
	got.mu.Lock()
	defer got.mu.Unlock()
	n := 0
	for k := range got.first {
		if t, ok := nominalOf(k); ok && !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// summarizeTriggers counts the triggers of nominal fire times in [from, to).
func summarizeTriggers(got *triggerArrivals, from, to time.Time, schedules int, interval time.Duration) ScheduleResult {
	got.mu.Lock()
	defer got.mu.Unlock()
	expected := schedules * int(to.Sub(from)/interval)
	var late []time.Duration
	doubled := 0
	for k, at := range got.first {
		t, ok := nominalOf(k)
		if !ok || t.Before(from) || !t.Before(to) {
			continue
		}
		late = append(late, at.Sub(got.fire[k]))
		if len(got.ids[k]) > 1 {
			doubled++
		}
	}
	r := summarize("", late, 0)
	return ScheduleResult{Schedules: schedules, Expected: expected, Triggers: len(late), PerSec: float64(len(late)) / to.Sub(from).Seconds(),
		P50: r.P50, P99: r.P99, Max: r.Max, Early: got.early, Missed: max(expected-len(late), 0), Doubled: doubled}
}

// runTemporalSchedules is the baseline: Temporal Schedules of a business type in the default
// mode, each run a workflow that delivers like a timer (signed HTTP). A run's callback carries
// no nominal time, so lateness is the arrival's distance past the interval multiple it follows.
func runTemporalSchedules(ctx context.Context, stack Stack, cfg SchedulesConfig, dbURL string) (ScheduleResult, error) {
	quiet := quietLogger()
	st, err := openDB(ctx, dbURL)
	if err != nil {
		return ScheduleResult{}, err
	}
	defer st.Close()
	bizType := "bench.cron.temporal"
	var mu sync.Mutex
	arrivals := map[string]map[int64]int{} // schedule → interval index → arrivals
	late := map[int64][]time.Duration{}    // interval index → first arrivals' lateness
	secret, _ := webhook.GenerateSecret()
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		now := time.Now()
		var cb api.TimerCallback
		if json.Unmarshal(body, &cb) != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if arrivals[cb.BizID] == nil {
			arrivals[cb.BizID] = map[int64]int{}
		}
		idx := now.UnixNano() / int64(cfg.Interval)
		if arrivals[cb.BizID][idx]++; arrivals[cb.BizID][idx] == 1 {
			late[idx] = append(late[idx], now.Sub(time.Unix(0, idx*int64(cfg.Interval))))
		}
	}))
	defer rcv.Close()
	if _, _, err := st.PutBizType(ctx, courier.BizType{Name: bizType, Delivery: courier.DeliveryHTTP, CallbackURL: rcv.URL,
		Secrets: []string{secret}}); err != nil {
		return ScheduleResult{}, err
	}
	pub, err := natsmq.Dial(stack.NATSURL, "courier-bench")
	if err != nil {
		return ScheduleResult{}, err
	}
	defer pub.Close()
	queue := "bench-cron-temporal"
	bizTypes := st.NewBizTypeCache(0, quiet)
	defer bizTypes.Close()
	w, err := worker.New(worker.Config{DisableRelay: true, AllowLoopbackCallbacks: true, BizTypeRefresh: 200 * time.Millisecond,
		Namespace: stack.namespace(), Relay: relay.Config{TaskQueue: queue}},
		worker.Deps{Temporal: stack.Temporal, Publisher: pub, Logger: quiet, BizTypes: bizTypes, TimerRows: st,
			Sources: []relay.Source{{Name: courier.DefaultSource, Store: st}}})
	if err != nil {
		return ScheduleResult{}, err
	}
	if err := w.Start(ctx); err != nil {
		return ScheduleResult{}, err
	}
	defer w.Stop()
	svc := timers.New(stack.Temporal, stack.namespace(), st, st, queue)
	svc.Logger = quiet
	ids := make([]string, cfg.TemporalSchedules)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench-temporal-%d", i)
		if _, err := svc.CreateSchedule(ctx, ids[i], api.ScheduleSpec{BizType: bizType, Interval: api.PositiveDuration(cfg.Interval)}); err != nil {
			return ScheduleResult{}, err
		}
	}
	defer func() {
		for _, id := range ids {
			_ = svc.DeleteSchedule(context.Background(), id)
		}
	}()
	from := time.Now().Add(cfg.Interval).Truncate(cfg.Interval).Add(cfg.Interval)
	to := from.Add(cfg.Duration)
	select {
	case <-ctx.Done():
		return ScheduleResult{}, ctx.Err()
	case <-time.After(time.Until(to.Add(cfg.Interval))):
	}
	mu.Lock()
	defer mu.Unlock()
	var inWin []time.Duration
	got, doubled := 0, 0
	for _, byIdx := range arrivals {
		for idx, c := range byIdx {
			at := time.Unix(0, idx*int64(cfg.Interval))
			if at.Before(from) || !at.Before(to) {
				continue
			}
			got++
			if c > 1 {
				doubled++
			}
		}
	}
	for idx, ls := range late {
		if at := time.Unix(0, idx*int64(cfg.Interval)); !at.Before(from) && at.Before(to) {
			inWin = append(inWin, ls...)
		}
	}
	r := summarize("", inWin, 0)
	expected := cfg.TemporalSchedules * int(cfg.Duration/cfg.Interval)
	res := ScheduleResult{Scenario: "Temporal Schedules (today), signed HTTP", Key: "temporal-schedules", Schedules: cfg.TemporalSchedules,
		Expected: expected, Triggers: got, PerSec: float64(got) / cfg.Duration.Seconds(), P50: r.P50, P99: r.P99, Max: r.Max,
		Missed: max(expected-got, 0), Doubled: doubled,
		Note: "lateness measured from the interval multiple before each arrival (a run's callback has no nominal time); early is not measurable"}
	c, err := scheduleRunCost(ctx, stack, ids[:min(len(ids), 5)], got)
	if err == nil {
		res.Cost = c
	}
	return res, nil
}

// scheduleRunCost reads a sample of Temporal schedule runs' histories (workflow ids
// schedule/<id>-<time>), plus the schedules' own workflows, per run.
func scheduleRunCost(ctx context.Context, stack Stack, ids []string, runs int) (Cost, error) {
	var c Cost
	var events, actions, n int
	for _, id := range ids {
		it, err := stack.Temporal.ScheduleClient().GetHandle(ctx, courier.ScheduleID(id)).Describe(ctx)
		if err != nil {
			return c, err
		}
		for _, a := range it.Info.RecentActions {
			if a.StartWorkflowResult == nil {
				continue
			}
			e, ac, err := historyCost(ctx, stack.Temporal, a.StartWorkflowResult.WorkflowID)
			if err != nil {
				return c, err
			}
			events, actions, n = events+e, actions+ac, n+1
		}
	}
	if n == 0 {
		return c, nil
	}
	c.Sampled = n
	c.Events = float64(events) / float64(n)
	// Each run is also one schedule action (billable) besides its workflow's own.
	c.Actions = float64(actions)/float64(n) + 1
	_ = runs
	return c, nil
}

var (
	zsetWindow = regexp.MustCompile(`triggers in window (\d+) of (\d+) expected \(([\d.]+)/s\), missed (\d+), doubled (\d+), early (\d+)`)
	zsetLate   = regexp.MustCompile(`lateness p50 (\S+) p99 (\S+) max (\S+); Redis commands \d+ \(([\d.]+) per trigger\)`)
)

// runZsetcron runs the zsetcron peer (Redis on 127.0.0.1:6379) with the same schedules,
// interval and window, and reads its summary.
func runZsetcron(ctx context.Context, cfg SchedulesConfig, mode string) (ScheduleResult, error) {
	cmd := exec.CommandContext(ctx, cfg.Zsetcron, "-schedules", strconv.Itoa(cfg.Schedules), "-interval", cfg.Interval.String(),
		"-duration", cfg.Duration.String(), "-workers", "8", "-mode", mode)
	outp, err := cmd.Output()
	if err != nil {
		return ScheduleResult{}, fmt.Errorf("%w: %s", err, outp)
	}
	res := ScheduleResult{Scenario: "zsetcron (Redis), " + mode, Key: "zsetcron-" + mode, Schedules: cfg.Schedules,
		Note: "Redis in memory, nothing synced to disk; actions/trigger column is Redis commands per trigger"}
	sc := bufio.NewScanner(strings.NewReader(string(outp)))
	for sc.Scan() {
		if m := zsetWindow.FindStringSubmatch(sc.Text()); m != nil {
			res.Triggers, _ = strconv.Atoi(m[1])
			res.Expected, _ = strconv.Atoi(m[2])
			res.PerSec, _ = strconv.ParseFloat(m[3], 64)
			res.Missed, _ = strconv.Atoi(m[4])
			res.Doubled, _ = strconv.Atoi(m[5])
			res.Early, _ = strconv.Atoi(m[6])
		}
		if m := zsetLate.FindStringSubmatch(sc.Text()); m != nil {
			res.P50, _ = time.ParseDuration(m[1])
			res.P99, _ = time.ParseDuration(m[2])
			res.Max, _ = time.ParseDuration(m[3])
			cmds, _ := strconv.ParseFloat(m[4], 64)
			res.Cost = Cost{Actions: cmds}
		}
	}
	return res, nil
}

// SchedulesReport converts schedule results.
func SchedulesReport(rs []ScheduleResult) Report {
	return reportOf("schedules", rs, func(r ScheduleResult) ReportRow {
		row := rowOf(r.Key, r.Triggers, r.PerSec, r.P50, r.P99, r.Max, r.Cost)
		row.Early, row.Missed, row.Doubled, row.Expected, row.Schedules, row.Note = r.Early, &r.Missed, &r.Doubled, r.Expected, r.Schedules, r.Note
		return row
	})
}
