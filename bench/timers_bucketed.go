package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/internal/defaults"
	"github.com/courier-oss/courier/mq/natsmq"
	"github.com/courier-oss/courier/timers"
)

// BucketedConfig sets up the bucketed scenarios of `courier bench timers --mode bucketed`.
type BucketedConfig struct {
	Timers      int           // timers per scenario; default 100,000
	Window      time.Duration // fire times spread across this window; default 10 s
	PostgresURL string        // also run on this PostgreSQL database, in a throwaway schema
	Out         io.Writer
}

// batchesAtOnce is how many POST /v1/timers/batch requests the bench has in flight.
const batchesAtOnce = 4

// RunTimersBucketed creates bucketed timers through the gateway's batch endpoint, all due
// within one window, and measures the creation rate, how late (never early) they arrive — as
// MQ messages on NATS, and as signed HTTP callbacks — and what they cost the engine per timer,
// on SQLite and (when given) PostgreSQL.
func RunTimersBucketed(ctx context.Context, stack Stack, cfg BucketedConfig) ([]TimerResult, error) {
	defaults.UnlessPositive(&cfg.Timers, 100_000)
	defaults.UnlessPositive(&cfg.Window, 10*time.Second)
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	var out []TimerResult
	i := 0
	err := forEachDatabase(ctx, "courier-bench-buckets-", cfg.PostgresURL, func(name, url string) error {
		for _, delivery := range []string{courier.DeliveryMQ, courier.DeliveryHTTP} {
			r, err := runBucketed(ctx, stack, cfg, name, url, delivery, i)
			if err != nil {
				return fmt.Errorf("bucketed timers (%s) on %s: %w", delivery, name, err)
			}
			i++
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return out, err
	}
	printTimers(cfg.Out, fmt.Sprintf("bucketed timers: %d per scenario, created through POST /v1/timers/batch (1,000 a request, %d at once), due across %s",
		cfg.Timers, batchesAtOnce, cfg.Window), out)
	return out, nil
}

// arrivals records each timer's first arrival, keyed by biz id.
type arrivals struct {
	mu   sync.Mutex
	at   map[string]time.Time
	fire map[string]time.Time
	want int
	done chan struct{}
}

func newArrivals(want int) *arrivals {
	return &arrivals{at: map[string]time.Time{}, fire: map[string]time.Time{}, want: want, done: make(chan struct{})}
}

func (a *arrivals) record(body []byte, now time.Time) {
	var cb api.TimerCallback
	if json.Unmarshal(body, &cb) != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, dup := a.at[cb.BizID]; dup {
		return
	}
	a.at[cb.BizID], a.fire[cb.BizID] = now, cb.FireAt
	if len(a.at) == a.want {
		close(a.done)
	}
}

// runBucketed is one scenario: a bucketed business type delivering by delivery on one database.
func runBucketed(ctx context.Context, stack Stack, cfg BucketedConfig, dbName, dbURL, delivery string, n int) (TimerResult, error) {
	quiet := quietLogger()
	st, err := openDB(ctx, dbURL)
	if err != nil {
		return TimerResult{}, err
	}
	defer st.Close()
	bizType := fmt.Sprintf("bench.bucketed.%s.%d", delivery, n)
	got := newArrivals(cfg.Timers)
	b := courier.BizType{Name: bizType, Delivery: delivery, TimerMode: courier.TimerModeBucketed}
	closeTarget, err := timerTarget(ctx, stack, &b, fmt.Sprintf("BENCHTIMERS%d", n), "bench.timers."+fmt.Sprint(n), got.record)
	if err != nil {
		return TimerResult{}, err
	}
	defer closeTarget()
	if _, _, err := st.PutBizType(ctx, b); err != nil {
		return TimerResult{}, err
	}
	pub, err := natsmq.Dial(stack.NATSURL, "courier-bench")
	if err != nil {
		return TimerResult{}, err
	}
	defer pub.Close()
	queue := fmt.Sprintf("bench-buckets-%d", n)
	stop, err := startTimerWorker(ctx, stack, st, pub, queue)
	if err != nil {
		return TimerResult{}, err
	}
	defer stop()

	svc := timers.New(stack.Temporal, stack.namespace(), st, st, queue)
	svc.Logger = quiet
	_, token, err := st.CreateAPIKey(ctx, "bench", []apikey.Scope{apikey.ScopeProducer})
	if err != nil {
		return TimerResult{}, err
	}
	gw := httptest.NewServer(gateway.New(gateway.Config{}, gateway.Deps{Keys: st, Outbox: st, BizTypes: st, Timers: svc, Logger: quiet}))
	defer gw.Close()

	// The window opens once every timer is surely created: a lead of a second per 2,000.
	lead := max(15*time.Second, time.Duration(cfg.Timers/2000)*time.Second)
	first := time.Now().Add(lead)
	created, elapsed, err := createBatches(ctx, gw.URL, token, bizType, first, cfg)
	if err != nil {
		return TimerResult{}, err
	}
	if first.Before(time.Now()) {
		return TimerResult{}, fmt.Errorf("creating %d timers took %s, past the window's start: raise the lead", cfg.Timers, elapsed)
	}
	select {
	case <-got.done:
	case <-time.After(time.Until(first) + cfg.Window + 5*time.Minute):
		return TimerResult{}, fmt.Errorf("only %d of %d timers arrived", len(got.at), cfg.Timers)
	case <-ctx.Done():
		return TimerResult{}, ctx.Err()
	}
	got.mu.Lock()
	res := lateness(fmt.Sprintf("courier bucketed, %s, %s", map[string]string{courier.DeliveryMQ: "NATS", courier.DeliveryHTTP: "signed HTTP"}[delivery], dbName),
		got.at, got.fire, float64(created)/elapsed.Seconds())
	got.mu.Unlock()
	res.Key = fmt.Sprintf("bucketed-%s-%s", delivery, dbName)
	if res.Cost, err = bucketCost(ctx, stack, bizType, cfg.Timers); err != nil {
		return TimerResult{}, err
	}
	return res, nil
}

// createBatches creates the timers through POST /v1/timers/batch, batchesAtOnce requests at a
// time, and returns how many it created and how long that took.
func createBatches(ctx context.Context, url, token, bizType string, first time.Time, cfg BucketedConfig) (int, time.Duration, error) {
	start := time.Now()
	type batch struct{ from, to int }
	work := make(chan batch)
	errs := make(chan error, batchesAtOnce)
	var mu sync.Mutex
	created := 0
	var wg sync.WaitGroup
	for range batchesAtOnce {
		wg.Go(func() {
			for b := range work {
				reqs := make([]api.TimerRequest, 0, b.to-b.from)
				for i := b.from; i < b.to; i++ {
					at := first.Add(time.Duration(i) * cfg.Window / time.Duration(cfg.Timers))
					reqs = append(reqs, api.TimerRequest{BizType: bizType, BizID: fmt.Sprintf("t-%d", i), When: api.At(at),
						Payload: json.RawMessage(`{"coupon":"expired"}`)})
				}
				n, err := postBatch(ctx, url, token, reqs)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				created += n
				mu.Unlock()
			}
		})
	}
	for from := 0; from < cfg.Timers; from += timers.MaxBatch {
		select {
		case work <- batch{from, min(from+timers.MaxBatch, cfg.Timers)}:
		case err := <-errs:
			close(work)
			wg.Wait()
			return 0, 0, err
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return 0, 0, err
	default:
	}
	if created != cfg.Timers {
		return 0, 0, fmt.Errorf("created %d of %d timers", created, cfg.Timers)
	}
	return created, time.Since(start), nil
}

// postBatch sends one batch and returns how many timers it created.
func postBatch(ctx context.Context, url, token string, reqs []api.TimerRequest) (int, error) {
	body, err := json.Marshal(api.TimerBatch{Timers: reqs})
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/timers/batch", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var res api.TimerBatchResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("POST /v1/timers/batch: %s (%v)", resp.Status, err)
	}
	if res.Refused > 0 {
		for _, it := range res.Items {
			if it.Error != nil {
				return 0, fmt.Errorf("a timer was refused: %s", it.Error.Message)
			}
		}
	}
	return res.Created, nil
}

// bucketCost is the engine's cost of a bucketed business type's timers, per timer: every
// event and billable action of its bucket runs (and of any run a timer was handed to),
// divided by the timers.
func bucketCost(ctx context.Context, stack Stack, bizType string, n int) (Cost, error) {
	var ids []string
	var token []byte
	query := fmt.Sprintf("%s = '%s' AND %s", courier.SABizType, bizType, courier.KindIn(courier.KindTimerBucket, courier.KindBucketedTimer))
	for {
		resp, err := stack.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: stack.namespace(), Query: query, PageSize: 1000, NextPageToken: token})
		if err != nil {
			return Cost{}, err
		}
		for _, e := range resp.GetExecutions() {
			if e.GetStatus().String() != "ContinuedAsNew" {
				ids = append(ids, e.GetExecution().GetWorkflowId())
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	var c Cost
	var events, actions int
	for _, id := range ids {
		e, a, err := historyCost(ctx, stack.Temporal, id)
		if err != nil {
			return Cost{}, err
		}
		events, actions = events+e, actions+a
	}
	c.Sampled = len(ids)
	c.Events = float64(events) / float64(n)
	c.Actions = float64(actions) / float64(n)
	return c, nil
}
