package taskworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/client"
)

// PushBatch is the JSON body courier POSTs to a queue's push_url for several attempts at once
// (a queue in the batched dispatch mode with push_batch_size above 1). Tests can build one.
type PushBatch = api.TaskPushBatch

// batchOf reads body as a batched push when it is one (a JSON object with "tasks"); ok is false
// for any other body, a single push included.
func batchOf(body []byte) (b PushBatch, ok bool) {
	var probe struct {
		Tasks json.RawMessage `json:"tasks"`
	}
	if json.Unmarshal(body, &probe) != nil || len(probe.Tasks) == 0 || string(probe.Tasks) == "null" {
		return PushBatch{}, false
	}
	// A "tasks" that is not a list of pushes is still a batch, a malformed one.
	if err := json.Unmarshal(body, &b); err != nil || len(b.Tasks) == 0 {
		return PushBatch{Tasks: nil}, true
	}
	return b, true
}

// serveBatch takes a batched push whose signature checked out (replay: an authentic copy of
// one taken before): each attempt is started or refused on its own, and the answer (202) names
// the refused ones, so courier ends each of them as a failure and its retry policy decides what
// follows. An attempt already running here is taken (it starts nothing); a replay starts
// nothing and refuses nothing, as a single push's replay does. When every attempt meets
// MaxConcurrent, the answer is the single push's 429 with Retry-After, for the whole request.
func (w *Worker) serveBatch(rw http.ResponseWriter, r *http.Request, b PushBatch, replay bool) {
	if len(b.Tasks) == 0 {
		writeError(rw, http.StatusBadRequest, courier.CodeInvalid, "not a batched task push: tasks must be a non-empty list of pushes")
		return
	}
	w.mu.Lock()
	closing := w.closing
	w.mu.Unlock()
	if closing {
		writeError(rw, http.StatusServiceUnavailable, courier.CodeUnavailable, ErrShutdown.Error())
		return
	}
	var ans api.TaskPushBatchAnswer
	busy := 0 // attempts refused at MaxConcurrent
	refuse := func(p Push, code int, msg string) {
		ans.Refused = append(ans.Refused, api.TaskRefusal{TaskID: p.TaskID, TaskVersion: p.TaskVersion, Attempt: p.Attempt,
			StatusCode: code, Message: msg})
	}
	for _, p := range b.Tasks {
		t, err := taskOf(p)
		if err != nil {
			refuse(p, http.StatusBadRequest, "not a task push: "+err.Error())
			continue
		}
		// Each push carries its task's trace; the request's headers carry the batch's.
		t.Traceparent, t.Tracestate = p.Traceparent, p.Tracestate
		if t.Traceparent == "" {
			t.Traceparent, t.Tracestate = r.Header.Get("traceparent"), r.Header.Get("tracestate")
		}
		if t.ResultsURL == "" {
			t.ResultsURL = b.ResultsURL
		}
		if replay {
			continue
		}
		_, err = w.start(t)
		switch {
		case errors.Is(err, ErrShutdown):
			refuse(p, http.StatusServiceUnavailable, err.Error())
		case errors.Is(err, errBusy):
			busy++
			refuse(p, http.StatusTooManyRequests, fmt.Sprintf("%d attempts already run here", w.cfg.MaxConcurrent))
		}
	}
	if busy > 0 && busy == len(b.Tasks) {
		// Nothing was taken, and only for want of room: the whole request is 429, as a single
		// push's would be, so courier tries it again after Retry-After within the attempts
		// rather than ending each of them.
		w.busy(rw)
		return
	}
	writeJSON(rw, http.StatusAccepted, ans)
}

// resultBatcher sends the results of attempts pushed with a results_url through POST
// /v1/tasks/results: a result waits at most linger for others, a request carries at most size,
// and at most maxResultRequests requests are on their way at once.
type resultBatcher struct {
	client *client.Client
	size   int
	linger time.Duration
	sends  chan struct{}

	mu      sync.Mutex
	pending []*pendingResult
	timer   *time.Timer
}

// pendingResult is one result waiting for its request's answer.
type pendingResult struct {
	item client.TaskResultItem
	done chan error // the result's own answer (client.ResultError), or the request's error
}

// Bounds of the result batches' requests.
const (
	maxResultRequests = 4                // result requests on their way at once
	resultRequestFor  = 30 * time.Second // one request's timeout
)

func newResultBatcher(c *client.Client, size int, linger time.Duration) *resultBatcher {
	return &resultBatcher{client: c, size: size, linger: linger, sends: make(chan struct{}, maxResultRequests)}
}

// report sends r in the next batch and returns its own answer as ReportResult would: nil when
// accepted, the *client.Error of its status, or the error of the whole request. It returns
// ctx's error when ctx ends first (the result may still be sent).
func (b *resultBatcher) report(ctx context.Context, t *Task, r api.TaskResult) error {
	p := &pendingResult{item: client.TaskResultItem{TaskID: t.ID, TaskVersion: t.Version, TaskResult: r}, done: make(chan error, 1)}
	b.mu.Lock()
	b.pending = append(b.pending, p)
	var full []*pendingResult
	switch {
	case len(b.pending) >= b.size:
		full = b.take()
	case b.timer == nil:
		b.timer = time.AfterFunc(b.linger, b.flush)
	}
	b.mu.Unlock()
	if full != nil {
		go b.send(full)
	}
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// take empties the batch; the caller holds mu.
func (b *resultBatcher) take() []*pendingResult {
	out := b.pending
	b.pending = nil
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	return out
}

// flush sends what waits once its linger is over.
func (b *resultBatcher) flush() {
	b.mu.Lock()
	batch := b.take()
	b.mu.Unlock()
	if len(batch) > 0 {
		b.send(batch)
	}
}

// send posts one batch and hands every result its answer.
func (b *resultBatcher) send(batch []*pendingResult) {
	b.sends <- struct{}{}
	defer func() { <-b.sends }()
	items := make([]client.TaskResultItem, len(batch))
	for i, p := range batch {
		items[i] = p.item
	}
	ctx, cancel := context.WithTimeout(context.Background(), resultRequestFor)
	defer cancel()
	ans, err := b.client.ReportResults(ctx, items)
	for i, p := range batch {
		if err != nil {
			p.done <- err
			continue
		}
		p.done <- client.ResultError(ans.Results[i])
	}
}
