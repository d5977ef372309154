package timers

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/tracing"
	"github.com/courier-oss/courier/workflows"
)

// A timer of its own keeps a row in courier's database beside its run (the workflow
// courier.KindTimer.Workflow, timer/<biz_type>/<biz_id>): the row decides its cancel and
// reschedule at once, whatever the engine's backlog, and the run follows it. See
// docs/decisions.md, "Timers and schedules".

// signalTimeout bounds how long a change waits for the server to take its signal to the run.
// The change is decided in the row before: a signal that does not get through only delays
// the run's learning of it (to the fire time it had, or to the sweep for one moved earlier).
const signalTimeout = 5 * time.Second

// createRowTimer arms a timer of its own: its row, then its run. A repeat of the create
// answers from the row (and starts the run again, in case the first create's start failed:
// a no-op while it runs).
func (s *Service) createRowTimer(ctx context.Context, p prepared) (api.Timer, bool, error) {
	r := p.req
	ins, err := s.rows.InsertTimers(ctx, []courier.TimerRecord{{BizType: r.BizType, BizID: r.BizID, FireAt: p.fireAt,
		Payload: r.Payload, RequestHash: p.hash, Trace: tracing.FromContext(ctx), Mode: courier.TimerModeWorkflow}})
	if err != nil {
		return api.Timer{}, false, fmt.Errorf("store timer: %w", err)
	}
	in := ins[0]
	t := timerOfRecord(in.Record)
	t.Payload = in.Record.Payload
	switch {
	case in.Conflict:
		return api.Timer{}, false, conflict(t.WorkflowID)
	case !in.Created:
		if in.Record.Mode == courier.TimerModeWorkflow && in.Record.State == courier.TimerScheduled {
			if err := s.startRowTimer(ctx, in.Record, enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE); err != nil && !alreadyStarted(err) {
				return api.Timer{}, false, fmt.Errorf("start timer: %w", err)
			}
		}
		return t, false, nil
	}
	err = s.startRowTimer(ctx, in.Record, enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE)
	if alreadyStarted(err) {
		// The id is taken by a run that had no row (a timer armed before rows were kept, or
		// one whose row was purged after it ended): that run is the timer, and the ids of
		// timers are never reused. The row just written goes, unless a change has touched it.
		if _, derr := s.rows.DeleteUnstartedTimer(ctx, r.BizType, r.BizID); derr != nil {
			return api.Timer{}, false, derr
		}
		return s.existingRun(ctx, p)
	}
	if err != nil {
		// The row is stored: a repeat of the create starts the run, or the sweep does once the
		// timer is overdue (OverdueTimerRuns).
		return api.Timer{}, false, fmt.Errorf("start timer: %w", err)
	}
	return t, true, nil
}

// startRowTimer starts the run of a timer of its own from its row.
func (s *Service) startRowTimer(ctx context.Context, rec courier.TimerRecord, reuse enumspb.WorkflowIdReusePolicy) error {
	_, err := s.tc.ExecuteWorkflow(ctx, s.rowTimerStart(rec, reuse), courier.KindTimer.Workflow, rowTimerParams(rec))
	return err
}

// rowTimerStart are the start options of a timer of its own's run.
func (s *Service) rowTimerStart(rec courier.TimerRecord, reuse enumspb.WorkflowIdReusePolicy) client.StartWorkflowOptions {
	memo := map[string]any{memoHash: rec.RequestHash}
	if rec.Trace.Parent != "" {
		memo[memoTraceParent] = rec.Trace.Parent
	}
	return client.StartWorkflowOptions{
		ID:                                       courier.TimerWorkflowID(rec.BizType, rec.BizID),
		TaskQueue:                                courier.KindTimer.TaskQueue(s.taskQueue),
		WorkflowIDReusePolicy:                    reuse,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		Memo:                                     memo,
		// With a worker on the same client (courier dev, the relay's timer rows), the first
		// workflow task comes back with the start instead of through matching.
		EnableEagerStart:      true,
		TypedSearchAttributes: timerSearchAttributes(courier.KindTimer, rec.BizType, rec.BizID, courier.TimerScheduled, rec.FireAt),
	}
}

func rowTimerParams(rec courier.TimerRecord) workflows.TimerParams {
	return workflows.TimerParams{BizType: rec.BizType, BizID: rec.BizID, FireAt: rec.FireAt, Payload: rec.Payload, Version: rec.Version}
}

func alreadyStarted(err error) bool {
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	return errors.As(err, &already)
}

// existingRun answers a create whose workflow id is taken by a run without a row: the same
// request (the hash in the run's memo) is that timer, another is a conflict.
func (s *Service) existingRun(ctx context.Context, p prepared) (api.Timer, bool, error) {
	id := courier.TimerWorkflowID(p.req.BizType, p.req.BizID)
	existing, err := s.memoHash(ctx, id)
	if err != nil {
		return api.Timer{}, false, err
	}
	if existing != p.hash {
		return api.Timer{}, false, conflict(id)
	}
	t, err := s.Get(ctx, p.req.BizType, p.req.BizID)
	return t, false, err
}

// tellRun signals the run of a timer of its own what its row now says. A run that is not there
// is started for a timer still scheduled (its create's or redelivery's start was lost);
// nothing is started for a cancelled one. Failing to reach the server changes no answer: the
// row has decided, and the run reads it at its fire time; the sweep signals timers overdue.
func (s *Service) tellRun(ctx context.Context, rec courier.TimerRecord) {
	sctx, cancel := context.WithTimeout(ctx, signalTimeout)
	defer cancel()
	change := workflows.TimerChange{Version: rec.Version, FireAt: rec.FireAt, Cancelled: rec.State == courier.TimerCancelled}
	id := courier.TimerWorkflowID(rec.BizType, rec.BizID)
	var err error
	switch rec.State {
	case courier.TimerCancelled:
		err = s.tc.SignalWorkflow(sctx, id, "", workflows.SignalChangeTimer, change)
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			err = nil // no run: nothing is armed to stop
		}
	case courier.TimerScheduled:
		// Only after a failed run may a new one start: that is a redelivery whose start was lost.
		_, err = s.tc.SignalWithStartWorkflow(sctx, id, workflows.SignalChangeTimer, change,
			s.rowTimerStart(rec, enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY), courier.KindTimer.Workflow, rowTimerParams(rec))
	default:
		return
	}
	if err != nil && ctx.Err() == nil {
		s.Logger.WarnContext(ctx, "telling a timer's run of its change failed; the run follows its row at its fire time",
			"biz_type", rec.BizType, "biz_id", rec.BizID, "version", rec.Version, "error", err)
	}
}

// redeliverRowTimer delivers a failed timer of its own again: its row scheduled, due now, and a
// new run of its workflow (a new delivery id, the type's whole budget).
func (s *Service) redeliverRowTimer(ctx context.Context, rec courier.TimerRecord) (api.Timer, error) {
	if rec.State != courier.TimerFailed {
		return api.Timer{}, notFailed(timerOfRecord(rec))
	}
	// The failed run records the failure in the row a moment before it notifies the type's
	// failure target and closes: only a closed run may be followed by another.
	id := courier.TimerWorkflowID(rec.BizType, rec.BizID)
	d, err := s.tc.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return api.Timer{}, err
	}
	if d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		wctx, cancel := context.WithTimeout(ctx, handOverWait)
		_ = s.tc.GetWorkflow(wctx, id, "").Get(wctx, nil) // its outcome is the previous delivery's
		timedOut := wctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return api.Timer{}, ctx.Err()
		}
		if timedOut {
			return api.Timer{}, &courier.Error{Code: courier.CodeUnavailable, RetryAfter: time.Second,
				Message: fmt.Sprintf("the timer's previous delivery (%s) has not closed yet; repeat the request in a moment", id)}
		}
	}
	rec, ok, err := s.rows.RedeliverTimerRun(ctx, rec.BizType, rec.BizID)
	if err != nil {
		return api.Timer{}, err
	}
	if !ok {
		return api.Timer{}, notFailed(timerOfRecord(rec))
	}
	// If this start is lost, the sweep starts the run: the row is scheduled and due.
	if err := s.startRowTimer(ctx, rec, enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY); err != nil {
		return api.Timer{}, fmt.Errorf("start the redelivery: %w", err)
	}
	return timerOfRecord(rec), nil
}
