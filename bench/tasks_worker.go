package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// taskWorker is the batched scenarios' HTTP task worker: it answers each push at once (a
// single push 202, a batched push 200 taking every task) and then reports the results, a
// batched push's all in one POST /v1/tasks/results, a single push's to its result_url. It
// holds a task from its push's arrival until its result's answer, and counts the most it held
// at once: what the queue's limit bounds.
type taskWorker struct {
	ctx   context.Context
	token string
	hc    *http.Client

	mu        sync.Mutex
	held, max int
	pushed    map[string]time.Time // task id → first push
	succeeded map[string]time.Time // task id → its success's answer
	duplicate int
	pushes    int
	errs      []error
	done      chan struct{} // closed once want tasks have succeeded
	want      int
	working   sync.WaitGroup
}

func newTaskWorker(ctx context.Context, token string, want int) *taskWorker {
	return &taskWorker{ctx: ctx, token: token, want: want, done: make(chan struct{}),
		pushed: make(map[string]time.Time, want), succeeded: make(map[string]time.Time, want),
		hc: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
}

// anyPush is a single push or a batched push: a batched one has tasks.
type anyPush struct {
	api.TaskPush
	Tasks []api.TaskPush `json:"tasks"`
}

func (w *taskWorker) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	var p anyPush
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	batched := len(p.Tasks) > 0
	ps := p.Tasks
	if !batched {
		ps = []api.TaskPush{p.TaskPush}
	}
	now := time.Now()
	w.mu.Lock()
	w.pushes++
	w.held += len(ps)
	w.max = max(w.max, w.held)
	for _, t := range ps {
		if _, seen := w.pushed[t.TaskID]; seen {
			w.duplicate++
			continue
		}
		w.pushed[t.TaskID] = now
	}
	w.mu.Unlock()
	w.working.Add(1)
	go func() {
		defer w.working.Done()
		w.report(ps, batched, p.ResultsURL)
	}()
	if batched {
		rw.WriteHeader(http.StatusOK)
		return
	}
	rw.WriteHeader(http.StatusAccepted)
}

// report sends the results of ps and records the successes answered.
func (w *taskWorker) report(ps []api.TaskPush, batched bool, resultsURL string) {
	var (
		ok  []string
		err error
	)
	if batched {
		ok, err = w.postResults(ps, resultsURL)
	} else {
		err = postResult(w.ctx, w.hc, w.token, ps[0])
		if err == nil {
			ok = []string{ps[0].TaskID}
		}
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held -= len(ps)
	if err != nil && w.ctx.Err() == nil {
		w.errs = append(w.errs, err)
	}
	for _, id := range ok {
		if _, dup := w.succeeded[id]; !dup {
			w.succeeded[id] = now
		}
	}
	if len(w.succeeded) == w.want {
		select {
		case <-w.done:
		default:
			close(w.done)
		}
	}
}

// postResults reports every task of a batched push as a success in one request and returns
// the tasks whose success was accepted (202).
func (w *taskWorker) postResults(ps []api.TaskPush, url string) ([]string, error) {
	var body api.TaskResults
	for _, p := range ps {
		body.Results = append(body.Results, api.TaskResultItem{TaskID: p.TaskID, TaskVersion: p.TaskVersion,
			TaskResult: api.TaskResult{Attempt: p.Attempt, Status: courier.OutcomeSuccess, StatusCode: 200, Message: "done"}})
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(w.ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+w.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return nil, fmt.Errorf("results: %d %s", resp.StatusCode, msg)
	}
	var ans api.TaskResultsAnswer
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		return nil, err
	}
	var ok []string
	var errs []error
	for _, a := range ans.Results {
		if a.Status == http.StatusAccepted {
			ok = append(ok, a.TaskID)
			continue
		}
		errs = append(errs, fmt.Errorf("result of %s attempt %d: %d", a.TaskID, a.Attempt, a.Status))
	}
	return ok, errors.Join(errs...)
}

// waitDone waits until want tasks have succeeded, or the first refused result, or ctx's end.
func (w *taskWorker) waitDone(ctx context.Context, want int) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-w.done:
			return nil
		case <-ctx.Done():
			w.mu.Lock()
			defer w.mu.Unlock()
			return fmt.Errorf("%d of %d tasks succeeded before the timeout: %w", len(w.succeeded), want, ctx.Err())
		case <-tick.C:
			if err := w.failed(); err != nil {
				return fmt.Errorf("result refused: %w", err)
			}
		}
	}
}

func (w *taskWorker) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return errors.Join(w.errs...)
}

// timings returns the last success and, for each of n tasks (named by idOf, inserted at
// inserted[i]), its insert→first push and first push→success, and how many tasks lack either.
func (w *taskWorker) timings(n int, idOf func(int) string, inserted []time.Time) (last time.Time, toPush, toSuccess []time.Duration, missing int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	toPush, toSuccess = make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	for i := range n {
		id := idOf(i)
		p, pushed := w.pushed[id]
		s, ok := w.succeeded[id]
		if !pushed || !ok {
			missing++
			continue
		}
		last = later(last, s)
		toPush = append(toPush, p.Sub(inserted[i]))
		toSuccess = append(toSuccess, s.Sub(p))
	}
	return last, toPush, toSuccess, missing
}

func (w *taskWorker) stats() (maxHeld, duplicate, pushes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max, w.duplicate, w.pushes
}

// wait waits for the reports under way and closes the client's connections.
func (w *taskWorker) wait() {
	w.working.Wait()
	w.hc.CloseIdleConnections()
}
