package tasks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/tracing"
	"github.com/courier-oss/courier/workflows"
)

// Store is what the service needs from the database.
type Store interface {
	InsertTask(ctx context.Context, r courier.TaskRequest) (courier.Task, courier.TaskInsertOutcome, error)
	GetTask(ctx context.Context, taskID string, version int64) (courier.Task, error)
	GetLatestTask(ctx context.Context, taskID string) (courier.Task, error)
	ListTasks(ctx context.Context, f courier.TaskFilter) ([]courier.Task, bool, error)
	CancelTask(ctx context.Context, taskID string, version int64) (courier.Task, bool, error)
	RetryTask(ctx context.Context, taskID string, version int64) (courier.Task, error)
	PutQueue(ctx context.Context, q courier.Queue) (courier.Queue, bool, error)
	GetQueue(ctx context.Context, name string) (courier.Queue, error)
	ListQueues(ctx context.Context) ([]courier.Queue, error)
	DeleteQueue(ctx context.Context, name string) error
	FinishReported(ctx context.Context, taskID string, version int64, attempt int, o contract.AttemptOutcome, hold string) (store.FinishResult, error)
	ReleaseSlotHolds(ctx context.Context, holds ...string) (int, error)
	FinishReportedMany(ctx context.Context, results []store.ReportedResult, hold string) ([]store.FinishResult, error)
	BeatBatchedAttempt(ctx context.Context, taskID string, version int64, attempt int) (bool, courier.TaskStatus, error)
}

var _ Store = (*store.Store)(nil)

// MaxMessageBytes bounds a result's message.
const MaxMessageBytes = 4 << 10

// Service is the task API.
type Service struct {
	store     Store
	tc        client.Client
	namespace string
	wake      func()
	metrics   *metrics.Tasks
	log       *slog.Logger
}

// NewService builds the service. wake nudges claimers in the same process (nil: none; other
// processes hear PostgreSQL notifications or poll); m counts the results the service records
// (nil: none).
func NewService(s Store, tc client.Client, namespace string, wake func(), m *metrics.Tasks, log *slog.Logger) *Service {
	if wake == nil {
		wake = func() {}
	}
	if log == nil {
		log = slog.Default()
	}
	return &Service{store: s, tc: tc, namespace: namespace, wake: wake, metrics: m, log: log}
}

// Insert applies the version rules (see store.InsertTask) and wakes the claimers. A request
// without a trace context gets ctx's (the gateway's span of the insert), so the task's attempts
// join the producer's trace.
func (s *Service) Insert(ctx context.Context, r courier.TaskRequest) (courier.Task, courier.TaskInsertOutcome, error) {
	if r.Trace.IsZero() {
		r.Trace = tracing.FromContext(ctx)
	}
	t, out, err := s.store.InsertTask(ctx, r)
	if err == nil && out != courier.TaskExisting {
		s.wake()
	}
	return t, out, err
}

// Get returns one version.
func (s *Service) Get(ctx context.Context, taskID string, version int64) (courier.Task, error) {
	return s.store.GetTask(ctx, taskID, version)
}

// List returns one page of the versions f selects, newest first, without payloads and
// results; more says whether another page follows.
func (s *Service) List(ctx context.Context, f courier.TaskFilter) ([]courier.Task, bool, error) {
	return s.store.ListTasks(ctx, f)
}

// Latest returns the highest stored version.
func (s *Service) Latest(ctx context.Context, taskID string) (courier.Task, error) {
	return s.store.GetLatestTask(ctx, taskID)
}

// Cancel cancels a pending or processing version; a processing one's attempt workflow is
// cancelled after its row and slot are (so a late result is refused either way). The cancel
// targets the run the attempt's push recorded, never whatever run holds the workflow id by
// then: a re-submission may already have started a new attempt under the same id. An attempt
// not pushed yet has no run to cancel: its push finds the row cancelled and ends the run.
func (s *Service) Cancel(ctx context.Context, taskID string, version int64) (courier.Task, error) {
	t, wasProcessing, err := s.store.CancelTask(ctx, taskID, version)
	if err != nil {
		return t, err
	}
	if wasProcessing {
		s.wake()
		if t.RunID == "" {
			return t, nil
		}
		err := s.tc.CancelWorkflow(ctx, courier.TaskWorkflowID(taskID, version), t.RunID)
		var nf *serviceerror.NotFound
		if err != nil && !errors.As(err, &nf) {
			// The row is cancelled and the slot free; the attempt ends by its own timeout and
			// its outcome is then refused. Log, do not fail the request.
			s.log.WarnContext(ctx, "cancel task workflow", "task_id", taskID, "version", version, "error", err)
		}
	}
	return t, nil
}

// Retry makes a failed or cancelled version pending again with a fresh retry budget, as
// re-submitting it with its own content does, and wakes the claimers. Only the highest version
// of a task can be retried; anything else is a conflict (see store.RetryTask).
func (s *Service) Retry(ctx context.Context, taskID string, version int64) (courier.Task, error) {
	t, err := s.store.RetryTask(ctx, taskID, version)
	if err == nil {
		s.wake()
	}
	return t, err
}

// Bulk action bounds.
const (
	// MaxBulkMax is the highest cap of one bulk action (that of the outbox's bulk redrive; the
	// gateway's default is 1,000).
	MaxBulkMax   = 10000
	bulkPage     = 500 // tasks read per statement (ids and statuses, never payloads)
	bulkParallel = 4   // tasks acted on at once
)

// CancelMatching cancels up to max (1 to MaxBulkMax) of the pending and processing tasks f
// selects, newest first, each through Cancel: a processing one's slot is freed in its row's
// transaction and its attempt's run cancelled. f.Status, if set, must be pending or
// processing; tasks in other statuses are never matched.
func (s *Service) CancelMatching(ctx context.Context, f courier.TaskFilter, max int) (courier.TaskBulkResult, error) {
	res, err := s.bulk(ctx, f, courier.TaskCancellable, max, func(ctx context.Context, t courier.Task) error {
		_, err := s.Cancel(ctx, t.TaskID, t.Version)
		return err
	})
	s.logBulk(ctx, "bulk task cancel", f, max, res, err)
	return res, err
}

// RetryMatching retries up to max (1 to MaxBulkMax) of the failed and cancelled tasks f
// selects, newest first, each through Retry; only each task id's highest version is matched (a
// lower one is stale). f.Status, if set, must be failed or cancelled.
func (s *Service) RetryMatching(ctx context.Context, f courier.TaskFilter, max int) (courier.TaskBulkResult, error) {
	f.Latest = true
	res, err := s.bulk(ctx, f, courier.TaskRetryable, max, func(ctx context.Context, t courier.Task) error {
		_, err := s.Retry(ctx, t.TaskID, t.Version)
		return err
	})
	s.logBulk(ctx, "bulk task retry", f, max, res, err)
	return res, err
}

// logBulk records a bulk action, its filter and what it did (or why it was refused).
func (s *Service) logBulk(ctx context.Context, msg string, f courier.TaskFilter, max int, res courier.TaskBulkResult, err error) {
	args := []any{"queue", f.Queue, "status", string(f.Status), "priority", f.Priority, "max", max,
		"affected", res.Affected, "skipped", res.Skipped, "more", res.More}
	if !f.CreatedAfter.IsZero() {
		args = append(args, "created_after", f.CreatedAfter)
	}
	if !f.CreatedBefore.IsZero() {
		args = append(args, "created_before", f.CreatedBefore)
	}
	if err != nil {
		args = append(args, "error", err)
	}
	s.log.InfoContext(ctx, msg, args...)
}

// bulk applies act to up to max of the tasks f selects in the statuses allowed, a page at a
// time, and counts them. A task that no longer qualifies when act reaches it (a conflict: it
// finished, was claimed, re-submitted; or it was purged) is skipped. Any other error stops the
// action: what was done stays done, and a repeat only finds what still matches.
func (s *Service) bulk(ctx context.Context, f courier.TaskFilter, allowed []courier.TaskStatus, max int,
	act func(context.Context, courier.Task) error) (courier.TaskBulkResult, error) {
	var res courier.TaskBulkResult
	if max < 1 || max > MaxBulkMax {
		return res, validation("max", fmt.Sprintf("max must be 1 to %d; got %d", MaxBulkMax, max))
	}
	if f.Status != "" && !slices.Contains(allowed, f.Status) {
		return res, validation("status", fmt.Sprintf("status must be one of %s for this action; got %q", statusList(allowed), f.Status))
	}
	f.Statuses = allowed
	f.After = nil
	for left := max; left > 0; {
		f.Limit = min(left, bulkPage)
		page, more, err := s.store.ListTasks(ctx, f)
		if err != nil || len(page) == 0 {
			return res, err
		}
		last := page[len(page)-1]
		f.After = &courier.TaskKey{CreatedAt: last.CreatedAt, TaskID: last.TaskID, Version: last.Version}
		left -= len(page)
		done, skipped, err := actOnAll(ctx, page, act)
		res.Affected += done
		res.Skipped += skipped
		if err != nil {
			return res, err
		}
		if !more {
			return res, nil
		}
		res.More = left == 0
	}
	return res, nil
}

// actOnAll applies act to every task, bulkParallel at a time; it returns how many were acted
// on, how many were skipped (conflict or not found) and the first other error.
func actOnAll(ctx context.Context, page []courier.Task, act func(context.Context, courier.Task) error) (done, skipped int, err error) {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, bulkParallel)
	)
	for _, t := range page {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			e := act(ctx, t)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case e == nil:
				done++
			case courier.ErrorCode(e) == courier.CodeConflict, courier.ErrorCode(e) == courier.CodeNotFound:
				skipped++
			case err == nil:
				err = e
			}
		}()
		if ctx.Err() != nil {
			break
		}
	}
	wg.Wait()
	return done, skipped, err
}

func statusList(ss []courier.TaskStatus) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

func validation(field, msg string) error {
	return &courier.Error{Code: courier.CodeValidation, Message: msg, Details: map[string]any{"field": field}}
}

// current returns the task if the attempt named is the one running; otherwise a conflict that
// says where the task is.
func (s *Service) current(ctx context.Context, taskID string, version int64, attempt int) (courier.Task, error) {
	if attempt < 1 {
		return courier.Task{}, validation("attempt", "attempt is required (the attempt number from the push)")
	}
	t, err := s.store.GetTask(ctx, taskID, version)
	if err != nil {
		return courier.Task{}, err
	}
	if t.Status != courier.TaskProcessing || t.Attempt != attempt {
		return courier.Task{}, &courier.Error{Code: courier.CodeConflict,
			Message: fmt.Sprintf("attempt %d of task %q version %d is not running (task is %s, current attempt %d)", attempt, taskID, version, t.Status, t.Attempt),
			Details: map[string]any{"status": string(t.Status), "attempt": t.Attempt}}
	}
	return t, nil
}

func notRunning(err error, attempt int) error {
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return &courier.Error{Code: courier.CodeConflict,
			Message: fmt.Sprintf("attempt %d is no longer running (it timed out, was cancelled or already has a result)", attempt)}
	}
	return err
}

// Report delivers a worker's result for one attempt. The result is recorded in the row first,
// a success and a failure alike (the failure with the queue's retry policy applied by the same
// finish the run would run), so GET shows it when the 202 goes out; then it is handed to the
// attempt's run marked recorded, and the run ends as the row says. If the row could not be
// written, the result is handed to the run unrecorded before the answer, and the run records
// it. A result for another attempt, for a task that is not processing, or for an attempt that
// has already ended (a repeated result included: GET shows it) is a conflict and changes
// nothing.
//
// The slot the recorded result frees stays held until the caller calls release, once it has
// written its answer to the worker: only then may a claimer hand it out, so a worker that
// counts a task as held until its report is acknowledged never holds more than the queue's
// limit. A release that never comes (the process died first) is done by any claimer after
// SlotHoldGrace. release is never nil.
func (s *Service) Report(ctx context.Context, taskID string, version int64, r api.TaskResult) (release func(), err error) {
	release = func() {}
	if err := checkResult(r); err != nil {
		return release, err
	}
	t, err := s.current(ctx, taskID, version, r.Attempt)
	if err != nil {
		return release, err
	}
	if s.metrics != nil && t.PushedAt != nil {
		s.metrics.PushToResult.WithLabelValues(t.Queue).Observe(time.Since(*t.PushedAt).Seconds())
	}
	res := contract.AttemptResult{Attempt: r.Attempt, Outcome: outcomeOf(r, tracing.FromContext(ctx))}
	hold := newHoldID()
	status, recorded, err := s.recordOutcome(ctx, t, r.Attempt, res.Outcome, hold)
	if err != nil {
		return release, err
	}
	if !recorded {
		if t.Batch != "" {
			// No run waits for a batched attempt: the row is the only place to record it.
			return release, unavailable("the result could not be recorded; try again")
		}
		return release, s.handOverUnrecorded(ctx, t, res)
	}
	release = s.releaser(ctx, hold)
	if t.Batch != "" {
		return release, nil // no run to hand it to: the row is where a batched attempt ends
	}
	// The row holds it: that is the answer. The run hears of it after the answer has gone out,
	// so a worker that reports before it answers the push (the run's workflow task stays open
	// while it pushes) is not kept waiting. A run that never hears of it ends by its deadline,
	// and its finish then finds the attempt over.
	res.Outcome.Recorded, res.Status = true, status
	go func() {
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), HandOverTimeout)
		defer cancel()
		if err := s.handOver(hctx, t, res); err != nil {
			s.log.WarnContext(hctx, "hand a recorded task result to its run (the run ends by its deadline)",
				"task_id", t.TaskID, "version", t.Version, "attempt", r.Attempt, "error", err)
		}
	}()
	return release, nil
}

// checkResult refuses a malformed result, naming its field.
func checkResult(r api.TaskResult) error {
	switch {
	case r.Attempt < 1:
		return validation("attempt", "attempt is required (the attempt number from the push)")
	case !r.Status.Reportable():
		return validation("status", `status must be "success" or "failure"`)
	case r.StatusCode < 0 || r.StatusCode > 999:
		return validation("status_code", "status_code must be from 0 to 999")
	case len(r.Message) > MaxMessageBytes || !utf8.ValidString(r.Message):
		return validation("message", fmt.Sprintf("message must be UTF-8 of at most %d bytes", MaxMessageBytes))
	case len(r.Result) > 0 && !json.Valid(r.Result):
		return validation("result", "result must be JSON")
	}
	return nil
}

// linkToTask labels the link from the span that records a result to its task's trace.
var linkToTask = attribute.String("courier.link", "task")

// outcomeOf is a worker's report as its attempt's outcome, tagged with the trace context of the
// call that carried it (zero for none).
func outcomeOf(r api.TaskResult, trace courier.TraceContext) contract.AttemptOutcome {
	return contract.AttemptOutcome{Kind: r.Status, StatusCode: r.StatusCode, Message: r.Message, Result: r.Result, Trace: trace}
}

func unavailable(msg string) error {
	return &courier.Error{Code: courier.CodeUnavailable, Message: msg}
}

// SlotHoldGrace is how long a slot freed by a recorded result may stay held for its answer
// before any claimer releases it: longer than any gateway takes from recording a result to
// answering it, short enough that a gateway that died between the two costs the queue that
// slot only briefly.
const SlotHoldGrace = 10 * time.Second

// newHoldID names the slots one answer's results hold until it is written.
func newHoldID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// AnswerSettle is how long after the answer to a result has been written the slots it frees
// are released: the answer's way through the worker's own HTTP client (a loaded machine can
// leave the goroutine that reads it waiting for a few milliseconds while courier's next claim
// and push are quicker).
const AnswerSettle = 10 * time.Millisecond

// releaser returns the release of the slots held under hold: once, AnswerSettle after it is
// called, with a fresh bounded context (the worker may have hung up), then a wake of this
// process's claimers. The release returns at once. A release that fails is logged and left to
// the grace.
func (s *Service) releaser(ctx context.Context, hold string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			time.AfterFunc(AnswerSettle, func() {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReportTimeout)
				defer cancel()
				if _, err := s.store.ReleaseSlotHolds(rctx, hold); err != nil {
					s.log.WarnContext(rctx, "release the slots of answered task results (any claimer releases them after the grace)",
						"hold", hold, "error", err, "grace", SlotHoldGrace)
					return
				}
				s.wake()
			})
		})
	}
}

// HandOverTimeout bounds how long the gateway keeps handing a recorded result to an attempt's
// run after it has answered the worker: a run without a heartbeat timeout takes it once its
// workflow task that pushes has ended, which lasts at most the push's tries.
const HandOverTimeout = 2 * time.Minute

// handOver gives an attempt's run the worker's result. An attempt with a heartbeat timeout
// (recorded by its push) waits for it in its push-and-wait activity, which is completed by its
// id; one without takes it as workflows.TaskResultUpdate, whose id is per attempt, so a repeat
// is answered by the first.
func (s *Service) handOver(ctx context.Context, t courier.Task, r contract.AttemptResult) error {
	id := courier.TaskWorkflowID(t.TaskID, t.Version)
	if t.AttemptHeartbeatTimeout > 0 {
		return s.tc.CompleteActivityByID(ctx, s.namespace, id, t.RunID, courier.TaskAttemptActivityID(r.Attempt), r, nil)
	}
	h, err := s.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, RunID: t.RunID, UpdateID: fmt.Sprintf("result-%d", r.Attempt),
		UpdateName: workflows.TaskResultUpdate, Args: []any{r}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return err
	}
	return h.Get(ctx, nil)
}

// ReportTimeout bounds the hand-over of a result the gateway could not record, which the
// worker's answer waits for; past it the result is answered 503 and the worker tries again.
const ReportTimeout = 10 * time.Second

// handOverUnrecorded hands a result the row could not take to the attempt's run, which records
// it, before the worker is answered: a run that refuses it (the attempt already has its
// outcome) or is gone is a conflict.
func (s *Service) handOverUnrecorded(ctx context.Context, t courier.Task, r contract.AttemptResult) error {
	hctx, cancel := context.WithTimeout(ctx, ReportTimeout)
	defer cancel()
	err := s.handOver(hctx, t, r)
	var app *temporal.ApplicationError
	switch {
	case err != nil && hctx.Err() != nil && ctx.Err() == nil:
		return &courier.Error{Code: courier.CodeUnavailable,
			Message: "the attempt's workflow did not take the result in time; try again"}
	case errors.As(err, &app):
		return notRunning(serviceerror.NewNotFound(app.Error()), r.Attempt) // refused: the attempt already has its outcome
	}
	return notRunning(err, r.Attempt)
}

// recordOutcome writes a worker's result into the row before the attempt's run hears of it,
// so GET shows it when the 202 goes out and the run has nothing left to record; the slot it
// frees stays held until the answer is written (Report). The guarded write decides between the result and whatever else ends the attempt
// meanwhile (its deadline, a cancel): the first to change the row wins. recorded is false when
// the write failed: the run then records the result itself. An attempt that had already ended,
// a repeated result included, is a conflict.
func (s *Service) recordOutcome(ctx context.Context, t courier.Task, attempt int, out contract.AttemptOutcome, hold string) (status courier.TaskStatus, recorded bool, err error) {
	// Not cut short by the worker hanging up: once written, the run must hear of it.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReportTimeout)
	defer cancel()
	fr, err := s.store.FinishReported(wctx, t.TaskID, t.Version, attempt, out, hold)
	if err != nil {
		// Had the write committed before the error, the run's finish finds it recorded (and
		// the result goes uncounted in the metrics).
		s.log.WarnContext(ctx, "record task result (the attempt's workflow records it instead)", "task_id", t.TaskID, "version", t.Version, "attempt", attempt, "error", err)
		return "", false, nil
	}
	if !fr.Applied {
		msg := fmt.Sprintf("attempt %d of task %q version %d is no longer running", attempt, t.TaskID, t.Version)
		var details map[string]any
		if fr.Status != "" { // "": purged meanwhile
			msg += fmt.Sprintf(" (task is %s)", fr.Status)
			details = map[string]any{"status": string(fr.Status)}
		}
		return "", false, &courier.Error{Code: courier.CodeConflict, Message: msg, Details: details}
	}
	if s.metrics != nil {
		s.metrics.Results.WithLabelValues(fr.Queue, string(out.Kind)).Inc()
	}
	// The span that recorded it links to the task's trace, as the run's finish links to the
	// result call's: the two are tied even when the worker sends no traceparent. The claimers
	// are woken by the slot's release, after the answer.
	tracing.Link(ctx, t.Trace, linkToTask)
	return fr.Status, true, nil
}

// Heartbeat extends a running attempt's heartbeat timeout: it records the heartbeat on the
// attempt's push-and-wait activity, in the run the push recorded. An attempt without a
// heartbeat timeout has nothing to extend: its heartbeats are accepted without effect.
func (s *Service) Heartbeat(ctx context.Context, taskID string, version int64, attempt int, details json.RawMessage) error {
	if len(details) > 0 && !json.Valid(details) {
		return validation("details", "details must be JSON")
	}
	t, err := s.current(ctx, taskID, version, attempt)
	if err != nil {
		return err
	}
	if t.AttemptHeartbeatTimeout == 0 {
		return nil // nothing to extend; the attempt runs
	}
	if t.Batch != "" {
		// A batched attempt's heartbeat timeout is kept in its row.
		ok, status, err := s.store.BeatBatchedAttempt(ctx, taskID, version, attempt)
		if err != nil || ok {
			return err
		}
		return &courier.Error{Code: courier.CodeConflict,
			Message: fmt.Sprintf("attempt %d is no longer running (it timed out, was cancelled or already has a result)", attempt),
			Details: map[string]any{"status": string(status)}}
	}
	var d []any
	if len(details) > 0 {
		d = append(d, details)
	}
	return notRunning(s.tc.RecordActivityHeartbeatByID(ctx, s.namespace, courier.TaskWorkflowID(taskID, version), t.RunID,
		courier.TaskAttemptActivityID(attempt), d...), attempt)
}

// PutQueue creates or replaces a queue and wakes the claimers (a raised limit or a new push
// URL frees work at once).
func (s *Service) PutQueue(ctx context.Context, q courier.Queue) (courier.Queue, bool, error) {
	out, created, err := s.store.PutQueue(ctx, q)
	if err == nil {
		s.wake()
	}
	return out, created, err
}

// GetQueue returns one queue.
func (s *Service) GetQueue(ctx context.Context, name string) (courier.Queue, error) {
	return s.store.GetQueue(ctx, name)
}

// ListQueues returns every queue.
func (s *Service) ListQueues(ctx context.Context) ([]courier.Queue, error) {
	return s.store.ListQueues(ctx)
}

// DeleteQueue deletes a queue without unfinished tasks, with its finished ones; a queue
// that still has pending or processing tasks is a conflict (store.DeleteQueue).
func (s *Service) DeleteQueue(ctx context.Context, name string) error {
	return s.store.DeleteQueue(ctx, name)
}
