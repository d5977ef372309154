// Package tasks is the prioritized-task service: the API side (insert with the version rules,
// results, heartbeats, cancel, queues) and the claimers that move pending tasks into their
// attempt workflows within each queue's concurrency limit.
package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"unicode/utf8"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities"
	"github.com/courier-oss/courier/store"
)

// Store is what the service needs from the database.
type Store interface {
	InsertTask(ctx context.Context, r courier.TaskRequest) (courier.Task, courier.TaskInsertOutcome, error)
	GetTask(ctx context.Context, taskID string, version int64) (courier.Task, error)
	GetLatestTask(ctx context.Context, taskID string) (courier.Task, error)
	CancelTask(ctx context.Context, taskID string, version int64) (courier.Task, bool, error)
	PutQueue(ctx context.Context, q courier.Queue) (courier.Queue, bool, error)
	GetQueue(ctx context.Context, name string) (courier.Queue, error)
	ListQueues(ctx context.Context) ([]courier.Queue, error)
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
	log       *slog.Logger
}

// NewService builds the service. wake nudges claimers in the same process (nil: none; other
// processes hear PostgreSQL notifications or poll).
func NewService(s Store, tc client.Client, namespace string, wake func(), log *slog.Logger) *Service {
	if wake == nil {
		wake = func() {}
	}
	if log == nil {
		log = slog.Default()
	}
	return &Service{store: s, tc: tc, namespace: namespace, wake: wake, log: log}
}

// Insert applies the version rules (see store.InsertTask) and wakes the claimers.
func (s *Service) Insert(ctx context.Context, r courier.TaskRequest) (courier.Task, courier.TaskInsertOutcome, error) {
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

// Latest returns the highest stored version.
func (s *Service) Latest(ctx context.Context, taskID string) (courier.Task, error) {
	return s.store.GetLatestTask(ctx, taskID)
}

// Cancel cancels a pending or processing version; a processing one's attempt workflow is
// cancelled after its row and slot are (so a late result is refused either way).
func (s *Service) Cancel(ctx context.Context, taskID string, version int64) (courier.Task, error) {
	t, wasProcessing, err := s.store.CancelTask(ctx, taskID, version)
	if err != nil {
		return t, err
	}
	if wasProcessing {
		s.wake()
		err := s.tc.CancelWorkflow(ctx, courier.TaskWorkflowID(taskID, version), "")
		var nf *serviceerror.NotFound
		if err != nil && !errors.As(err, &nf) {
			// The row is cancelled and the slot free; the attempt ends by its own timeout and
			// its outcome is then refused. Log, do not fail the request.
			s.log.Warn("cancel task workflow", "task_id", taskID, "version", version, "error", err)
		}
	}
	return t, nil
}

func validation(field, msg string) error {
	return &courier.Error{Code: courier.CodeValidation, Message: msg, Details: map[string]any{"field": field}}
}

// current checks that the attempt named is the one running; otherwise a conflict that says
// where the task is.
func (s *Service) current(ctx context.Context, taskID string, version int64, attempt int) error {
	if attempt < 1 {
		return validation("attempt", "attempt is required (the attempt number from the push)")
	}
	t, err := s.store.GetTask(ctx, taskID, version)
	if err != nil {
		return err
	}
	if t.Status != courier.TaskProcessing || t.Attempt != attempt {
		return &courier.Error{Code: courier.CodeConflict,
			Message: fmt.Sprintf("attempt %d of task %q version %d is not running (task is %s, current attempt %d)", attempt, taskID, version, t.Status, t.Attempt),
			Details: map[string]any{"status": string(t.Status), "attempt": t.Attempt}}
	}
	return nil
}

func notRunning(err error, attempt int) error {
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return &courier.Error{Code: courier.CodeConflict,
			Message: fmt.Sprintf("attempt %d is no longer running (it timed out, was cancelled or already has a result)", attempt)}
	}
	return err
}

// Report delivers a worker's result for one attempt: it completes the attempt's waiting
// activity by id, and the workflow records it. A result for another attempt, or for a task
// that is not processing, is a conflict and changes nothing.
func (s *Service) Report(ctx context.Context, taskID string, version int64, r courier.TaskResult) error {
	switch {
	case r.Status != courier.ResultSuccess && r.Status != courier.ResultFailure:
		return validation("status", `status must be "success" or "failure"`)
	case r.StatusCode < 0 || r.StatusCode > 999:
		return validation("status_code", "status_code must be from 0 to 999")
	case len(r.Message) > MaxMessageBytes || !utf8.ValidString(r.Message):
		return validation("message", fmt.Sprintf("message must be UTF-8 of at most %d bytes", MaxMessageBytes))
	case len(r.Result) > 0 && !json.Valid(r.Result):
		return validation("result", "result must be JSON")
	}
	if err := s.current(ctx, taskID, version, r.Attempt); err != nil {
		return err
	}
	err := s.tc.CompleteActivityByID(ctx, s.namespace, courier.TaskWorkflowID(taskID, version), "",
		courier.TaskAttemptActivityID(r.Attempt), activities.TaskOutcome{Kind: string(r.Status), StatusCode: r.StatusCode,
			Message: r.Message, Result: r.Result}, nil)
	return notRunning(err, r.Attempt)
}

// Heartbeat extends a running attempt's heartbeat timeout.
func (s *Service) Heartbeat(ctx context.Context, taskID string, version int64, attempt int, details json.RawMessage) error {
	if len(details) > 0 && !json.Valid(details) {
		return validation("details", "details must be JSON")
	}
	if err := s.current(ctx, taskID, version, attempt); err != nil {
		return err
	}
	var d []any
	if len(details) > 0 {
		d = append(d, details)
	}
	err := s.tc.RecordActivityHeartbeatByID(ctx, s.namespace, courier.TaskWorkflowID(taskID, version), "",
		courier.TaskAttemptActivityID(attempt), d...)
	return notRunning(err, attempt)
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
