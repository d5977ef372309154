package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities"
	"github.com/courier-oss/courier/webhook"
)

// PushPath is where courier pushes tasks: the queue's push_url.
const PushPath = "/push"

// Status codes docparse reports with its results (courier keeps them on the task).
const (
	StatusParsed   = http.StatusOK                  // success
	StatusUnusable = http.StatusUnprocessableEntity // the payload is not a document
	StatusStopped  = http.StatusServiceUnavailable  // docparse stopped before it finished
)

// Why an attempt's work ends early.
var (
	errAttemptGone = errors.New("courier says the attempt is no longer current")
	errSuperseded  = errors.New("a newer attempt of this task version was pushed")
	errShutdown    = errors.New("docparse is shutting down")
)

const (
	maxPushBytes   = 1 << 20 // courier's payload limit (512 KiB) plus the envelope
	maxResultTries = 5
	stopReportWait = 5 * time.Second // time to report "stopped" once the drain is over
)

// Worker takes pushes from courier and parses each document in its own goroutine: it answers
// 202 at once, heartbeats while it works and then posts the result. Courier bounds how many
// attempts are pushed at once (the queue's concurrency_limit); the Worker only has to be safe
// for concurrent pushes, and a second push of an attempt already running here starts nothing.
type Worker struct {
	courier    *CourierClient
	courierURL *url.URL          // result_url and heartbeat_url must point here
	verifier   *webhook.Verifier // nil: pushes are not verified
	parseTime  time.Duration
	retryWait  time.Duration // first wait between tries to report a result
	log        *slog.Logger
	sleep      func(ctx context.Context, d time.Duration) error // the simulated work

	base context.Context         // parent of every attempt; cancelled when the drain is over
	stop context.CancelCauseFunc // cancels base

	mu      sync.Mutex
	running map[versionKey]*job
	closing bool
	wg      sync.WaitGroup
}

// versionKey names a task version: one attempt of it runs here at a time.
type versionKey struct {
	taskID  string
	version int64
}

type job struct {
	attempt int
	cancel  context.CancelCauseFunc
}

// NewWorker builds a worker from a validated cfg; log may be nil.
func NewWorker(cfg Config, log *slog.Logger) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	u, err := url.Parse(cfg.CourierURL)
	if err != nil {
		return nil, err
	}
	var v *webhook.Verifier
	if cfg.Secret != "" {
		if v, err = webhook.NewVerifier(cfg.Secret); err != nil {
			return nil, err
		}
	}
	base, stop := context.WithCancelCause(context.Background())
	return &Worker{
		courier: &CourierClient{Key: cfg.APIKey}, courierURL: u, verifier: v, parseTime: cfg.ParseTime,
		retryWait: time.Second, log: log, sleep: sleepCtx, base: base, stop: stop, running: map[versionKey]*job{},
	}, nil
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Handler serves POST /push.
func (w *Worker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PushPath, w.handlePush)
	return mux
}

// PushAnswer is the 202 body of a push.
type PushAnswer struct {
	TaskID      string `json:"task_id"`
	TaskVersion int64  `json:"task_version"`
	Attempt     int    `json:"attempt"`
	Accepted    bool   `json:"accepted"`
	Duplicate   bool   `json:"duplicate,omitempty"` // this attempt (or a newer one) already runs here
}

// handlePush checks the push and starts the work: 401 for a missing, bad or stale signature
// (when a secret is set), 400 for a body that is not a task push, 503 while shutting down,
// otherwise 202 before any work is done. An unusable payload is still accepted: the attempt
// then ends with a failure result, so the task shows why.
func (w *Worker) handlePush(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, maxPushBytes))
	if err != nil {
		writeError(rw, http.StatusRequestEntityTooLarge, "body too large or unreadable")
		return
	}
	// ErrReplay comes only after the signature and timestamp checked out: an authentic copy of
	// a push seen before. It goes on; the running-attempt check below starts nothing twice.
	if w.verifier != nil {
		if err := w.verifier.Verify(body, r.Header); err != nil && !errors.Is(err, webhook.ErrReplay) {
			writeError(rw, http.StatusUnauthorized, err.Error())
			return
		}
	}
	p, every, err := DecodePush(body, w.courierURL)
	if err != nil {
		writeError(rw, http.StatusBadRequest, err.Error())
		return
	}
	dup, err := w.start(p, every)
	if err != nil {
		writeError(rw, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(rw, http.StatusAccepted, PushAnswer{TaskID: p.TaskID, TaskVersion: p.TaskVersion, Attempt: p.Attempt,
		Accepted: true, Duplicate: dup})
}

// DecodePush reads and checks a push body and returns it with the heartbeat interval its
// heartbeat_timeout asks for. The report URLs must point at courierURL (same scheme and
// host): the worker sends its API key there, so a forged push must not be able to pick them.
func DecodePush(body []byte, courierURL *url.URL) (activities.TaskPush, time.Duration, error) {
	var p activities.TaskPush
	if err := json.Unmarshal(body, &p); err != nil {
		return p, 0, fmt.Errorf("not a task push: %v", err)
	}
	switch {
	case p.TaskID == "":
		return p, 0, errors.New("task_id is required")
	case p.TaskVersion < 1:
		return p, 0, errors.New("task_version must be at least 1")
	case p.Attempt < 1:
		return p, 0, errors.New("attempt must be at least 1")
	}
	for _, f := range []struct{ name, raw string }{{"result_url", p.ResultURL}, {"heartbeat_url", p.HeartbeatURL}} {
		u, err := url.Parse(f.raw)
		if err != nil || u.Scheme != courierURL.Scheme || u.Host != courierURL.Host {
			return p, 0, fmt.Errorf("%s %q is not on courier's gateway %s", f.name, f.raw, courierURL.Scheme+"://"+courierURL.Host)
		}
	}
	every, err := HeartbeatInterval(p.HeartbeatTimeout)
	if err != nil {
		return p, 0, err
	}
	return p, every, nil
}

// HeartbeatInterval is how often to heartbeat for a push's heartbeat_timeout (a Go duration
// string): a third of it, so two lost heartbeats in a row are still not a timeout. Empty or
// zero means the queue has no heartbeat timeout: 0, no heartbeats.
func HeartbeatInterval(timeout string) (time.Duration, error) {
	if timeout == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(timeout)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("heartbeat_timeout %q is not a duration", timeout)
	}
	return d / 3, nil
}

// start runs the attempt in the background unless it (or a newer attempt of the same task
// version) already runs here; a newer attempt stops an older one still running, whose result
// courier would refuse anyway.
func (w *Worker) start(p activities.TaskPush, every time.Duration) (duplicate bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closing {
		return false, errShutdown
	}
	key := versionKey{p.TaskID, p.TaskVersion}
	if old, ok := w.running[key]; ok {
		if old.attempt >= p.Attempt {
			return true, nil
		}
		old.cancel(errSuperseded)
	}
	ctx, cancel := context.WithCancelCause(w.base)
	j := &job{attempt: p.Attempt, cancel: cancel}
	w.running[key] = j
	w.wg.Add(1) // under mu and before closing: Stop's Wait never races an Add
	go func() {
		defer w.wg.Done()
		defer func() {
			w.mu.Lock()
			if w.running[key] == j {
				delete(w.running, key)
			}
			w.mu.Unlock()
			cancel(nil)
		}()
		w.process(ctx, cancel, p, every)
	}()
	return false, nil
}

// Running is the number of attempts being worked on.
func (w *Worker) Running() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running)
}

// Stop refuses new pushes and waits for the running attempts until ctx is done; then it
// cancels the rest, each of which reports a failure (so courier retries it after its backoff
// instead of waiting for a timeout), and waits for them to end.
func (w *Worker) Stop(ctx context.Context) {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	done := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	w.stop(errShutdown)
	<-done
}

// process runs one attempt and reports how it ended, unless courier no longer wants it.
func (w *Worker) process(ctx context.Context, cancel context.CancelCauseFunc, p activities.TaskPush, every time.Duration) {
	log := w.log.With("task_id", p.TaskID, "task_version", p.TaskVersion, "attempt", p.Attempt, "priority", p.Priority)
	if !p.Deadline.IsZero() {
		// Past the deadline courier has failed the attempt and refuses its result.
		var stop context.CancelFunc
		ctx, stop = context.WithDeadline(ctx, p.Deadline)
		defer stop()
	}
	log.Info("parsing document", "queue", p.Queue, "deadline", p.Deadline, "heartbeat_every", every)
	res, err := w.work(ctx, cancel, p, every, log)
	if err != nil {
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, errShutdown):
			log.Warn("stopped before the document was parsed; reporting a failure so courier retries it")
			res = courier.TaskResult{Attempt: p.Attempt, Status: courier.ResultFailure, StatusCode: StatusStopped,
				Message: "docparse stopped before it finished"}
			var stop context.CancelFunc
			ctx, stop = context.WithTimeout(context.WithoutCancel(ctx), stopReportWait)
			defer stop()
		case errors.Is(cause, context.DeadlineExceeded):
			log.Warn("the deadline passed before the document was parsed: courier has failed this attempt")
			return
		default: // errAttemptGone, errSuperseded
			log.Info("work dropped", "reason", cause)
			return
		}
	}
	w.report(ctx, p, res, log)
}

// work parses the push's document, heartbeating meanwhile. It returns the result to report
// (a failure for an unusable payload), or an error when ctx ended first.
func (w *Worker) work(ctx context.Context, cancel context.CancelCauseFunc, p activities.TaskPush, every time.Duration, log *slog.Logger) (courier.TaskResult, error) {
	doc, err := DecodeDocument(p.Payload)
	if err != nil {
		return courier.TaskResult{Attempt: p.Attempt, Status: courier.ResultFailure, StatusCode: StatusUnusable,
			Message: err.Error()}, nil
	}
	hbCtx, stopHB := context.WithCancel(ctx)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		w.heartbeat(hbCtx, cancel, p, every, log)
	}()
	err = w.sleep(ctx, w.parseTime) // the "parsing"; a real worker would check ctx as it goes
	stopHB()
	<-hbDone
	if err == nil {
		err = context.Cause(ctx) // a 409 may have come in just as the work finished
	}
	if err != nil {
		return courier.TaskResult{}, err
	}
	sum := Parse(doc)
	raw, err := json.Marshal(sum)
	if err != nil {
		return courier.TaskResult{}, err
	}
	return courier.TaskResult{Attempt: p.Attempt, Status: courier.ResultSuccess, StatusCode: StatusParsed,
		Message: "parsed " + count(sum.Pages, "page") + ", " + count(sum.Words, "word"), Result: raw}, nil
}

// count says "1 page", "2 pages".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// heartbeat posts a heartbeat every interval until ctx ends. A 409 (or 404) cancels the
// attempt's work with errAttemptGone; any other failure is logged and the next tick tries
// again (heartbeats come three times per timeout).
func (w *Worker) heartbeat(ctx context.Context, gone context.CancelCauseFunc, p activities.TaskPush, every time.Duration, log *slog.Logger) {
	if every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		resp, err := w.courier.Heartbeat(ctx, p.HeartbeatURL, p.Attempt)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			log.Warn("heartbeat failed; trying again at the next tick", "err", err)
		case resp.Gone():
			log.Info("heartbeat refused: the attempt is no longer current, dropping the work",
				"status", resp.Status, "reason", resp.Message())
			gone(fmt.Errorf("%w: %s", errAttemptGone, resp.Message()))
			return
		case !resp.OK():
			log.Warn("heartbeat refused", "status", resp.Status, "reason", resp.Message())
		default:
			log.Info("heartbeat accepted")
		}
	}
}

// report posts the result, retrying transport errors, 429 and 5xx with a doubling wait until
// ctx ends or maxResultTries. A 409 means courier no longer wants it (the attempt timed out or
// was cancelled meanwhile): nothing more to do.
func (w *Worker) report(ctx context.Context, p activities.TaskPush, r courier.TaskResult, log *slog.Logger) {
	wait := w.retryWait
	for try := 1; ; try++ {
		resp, err := w.courier.Result(ctx, p.ResultURL, r)
		switch {
		case err == nil && resp.OK():
			log.Info("result reported", "status", r.Status, "status_code", r.StatusCode, "message", r.Message)
			return
		case err == nil && resp.Gone():
			log.Info("result refused: the attempt is no longer current", "status", resp.Status, "reason", resp.Message())
			return
		case err == nil && !resp.Retryable():
			log.Error("result refused", "status", resp.Status, "reason", resp.Message())
			return
		case err == nil:
			err = errors.New(resp.Message())
		}
		if try == maxResultTries {
			log.Error("giving up reporting the result; courier fails the attempt at its deadline", "tries", try, "err", err)
			return
		}
		log.Warn("result not delivered; retrying", "try", try, "in", wait, "err", err)
		if sleepCtx(ctx, wait) != nil {
			log.Error("result not delivered before the attempt ended", "err", err)
			return
		}
		wait *= 2
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"message": msg}})
}
