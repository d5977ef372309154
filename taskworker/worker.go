package taskworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/propagation"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/client"
	"github.com/courier-oss/courier/internal/defaults"
	"github.com/courier-oss/courier/webhook"
)

// Config configures a Worker.
type Config struct {
	// Client reaches courier's gateway with an API key of the worker scope; results and
	// heartbeats go through it (to the task's routes under its base URL, never to a URL a push
	// names, so a forged push cannot collect the key). Required.
	Client *client.Client
	// Secrets are the queue's whsec_… signing secrets; a push must be signed by one of them.
	// During a rotation give both the new and the old one. Required unless AllowUnsigned.
	Secrets []string
	// AllowUnsigned accepts pushes without a signature when Secrets is empty. Only for
	// development: anyone who can reach the handler could then have it work on, and report
	// results for, any task.
	AllowUnsigned bool
	// MaxConcurrent bounds the attempts run at once; a push beyond it is answered 429 with
	// Retry-After, and courier tries the push again after it. A batched push that finds no room
	// at all is answered the same; one that finds some has the attempts beyond it refused on
	// their own (status code 429), each of which courier ends as a failed attempt that its
	// queue's retry policy retries: give a batched queue a concurrency_limit no higher than the
	// MaxConcurrent its workers add up to. Default 0: unbounded (the queue's concurrency_limit
	// still bounds what courier pushes).
	MaxConcurrent int
	// RetryAfter is the wait a 429 asks courier for; default 2 s.
	RetryAfter time.Duration
	// HeartbeatFraction of the push's heartbeat_timeout is the heartbeat interval; default 1/3,
	// so one lost heartbeat is not yet a timeout. Must be in (0, 1).
	HeartbeatFraction float64
	// MaxBodyBytes bounds a push body; default 2 MiB (a task payload is at most 512 KiB). A
	// batched push carries up to the queue's push_batch_size payloads: raise it to fit.
	MaxBodyBytes int64
	// ResultBatchSize bounds the results sent in one POST /v1/tasks/results, for attempts
	// pushed with a results_url (a queue in the batched dispatch mode); default 100, at most
	// client.MaxTaskResults; 1 sends each result alone to its task's result route.
	ResultBatchSize int
	// ResultLinger is how long a result waits for others to share its request; default 20 ms.
	ResultLinger time.Duration
	// Logger receives one line per attempt's outcome and every problem; default slog.Default().
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultRetryAfter        = 2 * time.Second
	DefaultHeartbeatFraction = 1.0 / 3
	DefaultMaxBodyBytes      = 2 << 20
	DefaultResultBatchSize   = 100
	DefaultResultLinger      = 20 * time.Millisecond
)

// Bounds of result reporting.
const (
	maxMessageBytes   = 4 << 10 // courier's limit on a result's message
	firstResultWait   = 200 * time.Millisecond
	maxResultWait     = 5 * time.Second
	shutdownReportFor = 5 * time.Second  // reporting "shut down" after the drain ran out
	shutdownGrace     = 10 * time.Second // how long Shutdown waits for cancelled handlers to return
)

var errBusy = errors.New("at the worker's MaxConcurrent")

// Worker is the http.Handler of a queue's push_url. Mount it for POST (mux.Handle("POST /push",
// w)); it is safe for concurrent pushes.
type Worker struct {
	cfg      Config
	handler  HandlerFunc
	client   *client.Client
	verifier *webhook.Verifier // nil: pushes are not verified
	results  *resultBatcher    // nil: every result goes alone
	log      *slog.Logger
	base     context.Context // parent of every attempt; cancelled when Shutdown gives up waiting
	stop     context.CancelCauseFunc

	mu      sync.Mutex
	running map[versionKey]*job
	active  int
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

// New builds a Worker that runs h for every attempt pushed to it.
func New(cfg Config, h HandlerFunc) (*Worker, error) {
	switch {
	case h == nil:
		return nil, errors.New("taskworker: a handler is required")
	case cfg.Client == nil:
		return nil, errors.New("taskworker: Config.Client is required (the gateway, with a worker-scope key)")
	case len(cfg.Secrets) == 0 && !cfg.AllowUnsigned:
		return nil, errors.New("taskworker: Config.Secrets is required (the queue's signing secrets); set AllowUnsigned to accept unsigned pushes")
	case cfg.MaxConcurrent < 0:
		return nil, errors.New("taskworker: MaxConcurrent must not be negative")
	case cfg.HeartbeatFraction < 0 || cfg.HeartbeatFraction >= 1:
		return nil, errors.New("taskworker: HeartbeatFraction must be in (0, 1)")
	case cfg.ResultBatchSize < 0 || cfg.ResultBatchSize > client.MaxTaskResults:
		return nil, fmt.Errorf("taskworker: ResultBatchSize must be from 0 (the default) to %d", client.MaxTaskResults)
	case cfg.ResultLinger < 0:
		return nil, errors.New("taskworker: ResultLinger must not be negative")
	}
	if cfg.ResultBatchSize == 0 {
		cfg.ResultBatchSize = DefaultResultBatchSize
	}
	if cfg.ResultLinger == 0 {
		cfg.ResultLinger = DefaultResultLinger
	}
	defaults.UnlessPositive(&cfg.RetryAfter, DefaultRetryAfter)
	defaults.IfZero(&cfg.HeartbeatFraction, DefaultHeartbeatFraction)
	defaults.UnlessPositive(&cfg.MaxBodyBytes, DefaultMaxBodyBytes)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Worker{cfg: cfg, handler: h, client: cfg.Client, log: cfg.Logger, running: map[versionKey]*job{}}
	if len(cfg.Secrets) > 0 {
		v, err := webhook.NewVerifier(cfg.Secrets...)
		if err != nil {
			return nil, fmt.Errorf("taskworker: Secrets: %w", err)
		}
		w.verifier = v
	}
	if cfg.ResultBatchSize > 1 {
		w.results = newResultBatcher(cfg.Client, cfg.ResultBatchSize, cfg.ResultLinger)
	}
	w.base, w.stop = context.WithCancelCause(context.Background())
	return w, nil
}

// ServeHTTP takes one push: 405 for anything but POST, 413 for a body over MaxBodyBytes, 401
// for a missing, wrong or stale signature, 400 for a body that is not a task push, 503 during
// Shutdown, 429 with Retry-After at MaxConcurrent, and otherwise 202 before any work is done. A
// push of an attempt already running here (or an authentic copy of a push seen before) is 202
// and starts nothing; a newer attempt of a task version running here ends the older one's
// context (ErrSuperseded). A batched push (PushBatch) is verified the same way and answered
// 202 with an api.TaskPushBatchAnswer naming the attempts refused on their own: a malformed
// one (400), one beyond MaxConcurrent (429), one arriving during Shutdown (503).
func (w *Worker) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		rw.Header().Set("Allow", http.MethodPost)
		writeError(rw, http.StatusMethodNotAllowed, courier.CodeMethodNotAllowed, "send pushes with POST")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, w.cfg.MaxBodyBytes))
	if err != nil {
		writeError(rw, http.StatusRequestEntityTooLarge, courier.CodeTooLarge, "the push body is too large or unreadable")
		return
	}
	replay := false
	if w.verifier != nil {
		// ErrReplay comes only once the signature and timestamp checked out: an authentic copy
		// of a push accepted before. Courier signs every try anew, so it starts nothing.
		if err := w.verifier.Verify(body, r.Header); errors.Is(err, webhook.ErrReplay) {
			replay = true
		} else if err != nil {
			writeError(rw, http.StatusUnauthorized, courier.CodeUnauthenticated, err.Error())
			return
		}
	}
	if b, ok := batchOf(body); ok {
		w.serveBatch(rw, r, b, replay)
		return
	}
	t, err := decodePush(body)
	if err != nil {
		writeError(rw, http.StatusBadRequest, courier.CodeInvalid, err.Error())
		return
	}
	if id := r.Header.Get(webhook.HeaderID); id != "" {
		t.DeliveryID = id
	}
	t.Traceparent, t.Tracestate = r.Header.Get("traceparent"), r.Header.Get("tracestate")
	dup := replay
	if !replay {
		dup, err = w.start(t)
	}
	switch {
	case errors.Is(err, ErrShutdown):
		writeError(rw, http.StatusServiceUnavailable, courier.CodeUnavailable, err.Error())
		return
	case errors.Is(err, errBusy):
		w.busy(rw)
		return
	}
	writeJSON(rw, http.StatusAccepted, api.PushAnswer{TaskID: t.ID, TaskVersion: t.Version, Attempt: t.Attempt, Accepted: true, Duplicate: dup})
}

// busy answers a push that finds no room: 429 with Retry-After.
func (w *Worker) busy(rw http.ResponseWriter) {
	rw.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(w.cfg.RetryAfter.Seconds()))))
	writeError(rw, http.StatusTooManyRequests, courier.CodeRateLimited,
		fmt.Sprintf("%d attempts already run here; try again later", w.cfg.MaxConcurrent))
}

// start runs the attempt in the background unless it (or a newer attempt of the same version)
// already runs here.
func (w *Worker) start(t *Task) (duplicate bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closing {
		return false, ErrShutdown
	}
	key := versionKey{t.ID, t.Version}
	if old, ok := w.running[key]; ok {
		if old.attempt >= t.Attempt {
			return true, nil
		}
		// Courier pushes attempt n+1 only once attempt n has its outcome: the old work is moot.
		old.cancel(ErrSuperseded)
	}
	if w.cfg.MaxConcurrent > 0 && w.active >= w.cfg.MaxConcurrent {
		return false, errBusy
	}
	ctx, cancel := context.WithCancelCause(w.base)
	ctx, cancelDeadline := context.WithDeadlineCause(ctx, t.Deadline, ErrDeadline)
	ctx = context.WithValue(ctx, taskKey{}, t)
	ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": t.Traceparent, "tracestate": t.Tracestate})
	j := &job{attempt: t.Attempt, cancel: cancel}
	w.running[key] = j
	w.active++
	w.wg.Add(1) // under mu and before closing: Shutdown's Wait never races an Add
	go func() {
		defer w.wg.Done()
		defer func() {
			w.mu.Lock()
			if w.running[key] == j {
				delete(w.running, key)
			}
			w.active--
			w.mu.Unlock()
			cancelDeadline()
			cancel(nil)
		}()
		w.process(ctx, cancel, t)
	}()
	return false, nil
}

// Running is the number of attempts whose handler runs or whose result is being reported.
func (w *Worker) Running() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.active
}

// Shutdown stops taking pushes (503 from then on) and waits for the running attempts to
// finish and report. When ctx ends first, it cancels their contexts (cause ErrShutdown); each
// then reports a failure (status code 503) so courier retries it after its backoff rather than
// at its timeout, and Shutdown waits a little longer for that before it returns ctx's error.
// Stop the HTTP server first (http.Server.Shutdown), then the Worker.
func (w *Worker) Shutdown(ctx context.Context) error {
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
		return nil
	case <-ctx.Done():
	}
	w.stop(ErrShutdown)
	grace := time.NewTimer(shutdownGrace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		w.log.Warn("taskworker: handlers still running after shutdown; they ignore their context", "running", w.Running())
	}
	return ctx.Err()
}

// process runs one attempt: the handler with heartbeats alongside, then the report.
func (w *Worker) process(ctx context.Context, cancel context.CancelCauseFunc, t *Task) {
	log := w.log.With("task_id", t.ID, "task_version", t.Version, "attempt", t.Attempt)
	hbCtx, stopHB := context.WithCancel(ctx)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		w.heartbeat(hbCtx, cancel, t, log)
	}()
	result, err := w.call(ctx, t, log)
	stopHB()
	<-hbDone

	var cause error
	if ctx.Err() != nil {
		cause = context.Cause(ctx)
	}
	switch {
	case errors.Is(cause, ErrAttemptOver), errors.Is(cause, ErrSuperseded):
		log.Info("taskworker: work dropped: the attempt is over", "reason", cause)
		return
	case errors.Is(cause, ErrDeadline):
		log.Warn("taskworker: the attempt's deadline passed before the work finished; courier fails the attempt", "deadline", t.Deadline)
		return
	}
	res := api.TaskResult{Attempt: t.Attempt}
	switch {
	case err == nil && len(result) > 0 && !json.Valid(result):
		res.Status, res.StatusCode, res.Message = courier.OutcomeFailure, http.StatusInternalServerError, "the handler's result is not JSON"
	case err == nil:
		res.Status, res.StatusCode, res.Message, res.Result = courier.OutcomeSuccess, http.StatusOK, t.Message(), result
	case errors.Is(cause, ErrShutdown):
		res.Status, res.StatusCode, res.Message = courier.OutcomeFailure, http.StatusServiceUnavailable, "the worker shut down before the work finished"
	default:
		res.Status, res.StatusCode, res.Message = courier.OutcomeFailure, http.StatusInternalServerError, err.Error()
		var f *Failure
		if errors.As(err, &f) {
			res.StatusCode = f.StatusCode
		}
	}
	res.Message = clip(res.Message)
	rctx, rcancel := context.WithDeadline(context.WithoutCancel(ctx), t.Deadline)
	defer rcancel()
	if errors.Is(cause, ErrShutdown) {
		var c2 context.CancelFunc
		rctx, c2 = context.WithTimeout(rctx, shutdownReportFor)
		defer c2()
	}
	w.report(rctx, t, res, log)
}

// call runs the handler, turning a panic into an error.
func (w *Worker) call(ctx context.Context, t *Task, log *slog.Logger) (result json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("taskworker: the handler panicked", "panic", p, "stack", string(debug.Stack()))
			result, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	return w.handler(ctx, t)
}

// heartbeat posts a heartbeat every fraction of the heartbeat timeout until ctx ends. A 409 or
// 404 ends the attempt's context with ErrAttemptOver; any other failure is logged and the next
// tick tries again.
func (w *Worker) heartbeat(ctx context.Context, over context.CancelCauseFunc, t *Task, log *slog.Logger) {
	if t.HeartbeatTimeout <= 0 {
		return
	}
	every := max(time.Duration(float64(t.HeartbeatTimeout)*w.cfg.HeartbeatFraction), 10*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		hctx, cancel := context.WithTimeout(ctx, every)
		_, err := w.client.Heartbeat(hctx, t.ID, t.Version, t.Attempt, nil)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, client.ErrConflict), errors.Is(err, client.ErrNotFound):
			log.Info("taskworker: heartbeat refused: the attempt is over", "reason", err)
			over(fmt.Errorf("%w: %v", ErrAttemptOver, err))
			return
		case ctx.Err() != nil:
			return
		default:
			log.Warn("taskworker: heartbeat failed; trying again at the next tick", "err", err)
		}
	}
}

// report posts the result (with others in one POST /v1/tasks/results when the push named a
// results_url), retrying 429, 5xx and connection errors with a doubling wait (or
// the answer's Retry-After) until ctx ends. A 409 or 404 means courier no longer wants it.
func (w *Worker) report(ctx context.Context, t *Task, r api.TaskResult, log *slog.Logger) {
	send := func() error {
		_, err := w.client.ReportResult(ctx, t.ID, t.Version, r)
		return err
	}
	if t.ResultsURL != "" && w.results != nil {
		send = func() error { return w.results.report(ctx, t, r) }
	}
	wait := firstResultWait
	for try := 1; ; try++ {
		err := send()
		var ae *client.Error
		switch {
		case err == nil:
			log.Info("taskworker: result reported", "status", r.Status, "status_code", r.StatusCode, "message", r.Message)
			return
		case errors.Is(err, client.ErrConflict), errors.Is(err, client.ErrNotFound):
			log.Info("taskworker: result refused: the attempt is over", "reason", err)
			return
		case errors.As(err, &ae) && ae.StatusCode < 500 && ae.StatusCode != http.StatusTooManyRequests:
			log.Error("taskworker: result refused", "err", err)
			return
		case ctx.Err() != nil:
			log.Error("taskworker: result not delivered before the attempt's deadline", "tries", try, "err", err)
			return
		}
		if ae != nil {
			wait = max(wait, ae.RetryAfter)
		}
		log.Warn("taskworker: result not delivered; trying again", "try", try, "in", wait, "err", err)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			log.Error("taskworker: result not delivered before the attempt's deadline", "tries", try, "err", err)
			return
		case <-timer.C:
		}
		wait = min(wait*2, maxResultWait)
	}
}

// clip keeps a message within courier's limit, on a rune boundary and valid UTF-8.
func clip(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxMessageBytes {
		return s
	}
	s = s[:maxMessageBytes-len("…")]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

func writeJSON(rw http.ResponseWriter, status int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	_ = json.NewEncoder(rw).Encode(v)
}

// writeError answers in courier's error shape.
func writeError(rw http.ResponseWriter, status int, code courier.Code, msg string) {
	writeJSON(rw, status, map[string]any{"error": map[string]any{"code": code, "message": msg}})
}
