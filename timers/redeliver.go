package timers

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/workflows"
)

// notFailed answers a redelivery of a timer that has not failed.
func notFailed(t api.Timer) error {
	return &courier.Error{Code: courier.CodeConflict,
		Message: fmt.Sprintf("timer is %s; only a failed timer can be redelivered", t.State), Details: map[string]any{"state": t.State}}
}

// Redeliver delivers a failed timer again: the same biz_type and biz_id, a new delivery (a new
// delivery id) with the type's whole retry budget, now. A timer of its own gets a new run of
// its workflow (its version bumped, its create request still recognised), its row scheduled
// again and due now when it has one; a bucketed timer's row goes back to firing and a run of
// its own delivers it. A timer that has not failed is a conflict.
func (s *Service) Redeliver(ctx context.Context, bizType, bizID string) (api.Timer, error) {
	if rec, ok, err := s.row(ctx, bizType, bizID); err != nil {
		return api.Timer{}, err
	} else if ok && rec.Mode == courier.TimerModeWorkflow {
		return s.redeliverRowTimer(ctx, rec)
	}
	if s.rows != nil {
		rec, ok, err := s.rows.RedeliverTimerRecord(ctx, bizType, bizID)
		switch {
		case courier.ErrorCode(err) == courier.CodeNotFound:
			// not a bucketed timer
		case err != nil:
			return api.Timer{}, err
		case !ok:
			return api.Timer{}, notFailed(timerOfRecord(rec))
		default:
			// The row is firing: if this process dies before the run starts, the sweep of
			// stranded timers starts it.
			if err := s.HandOver(ctx, rec, "", false); err != nil {
				return api.Timer{}, fmt.Errorf("start the redelivery: %w", err)
			}
			if err := s.rows.MarkTimerHanded(ctx, bizType, bizID); err != nil {
				return api.Timer{}, err
			}
			return timerOfRecord(rec), nil
		}
	}
	return s.redeliverWorkflow(ctx, bizType, bizID)
}

// redeliverWorkflow starts a new run of a failed timer's workflow, firing now.
func (s *Service) redeliverWorkflow(ctx context.Context, bizType, bizID string) (api.Timer, error) {
	id := courier.TimerWorkflowID(bizType, bizID)
	t, err := s.getWorkflow(ctx, bizType, bizID)
	if err != nil {
		return api.Timer{}, err
	}
	if t.State != courier.TimerFailed {
		return api.Timer{}, notFailed(t)
	}
	d, err := s.tc.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return api.Timer{}, err
	}
	first, err := s.firstInput(ctx, id, d.GetWorkflowExecutionInfo().GetExecution().GetRunId())
	if err != nil {
		return api.Timer{}, err
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	memo := map[string]any{}
	for k, v := range d.GetWorkflowExecutionInfo().GetMemo().GetFields() {
		memo[k] = v // the create request's hash stays: a repeat of it is still recognised
	}
	_, err = s.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:        id,
		TaskQueue: courier.KindRowlessTimer.TaskQueue(s.taskQueue),
		// Only a failed run may be followed: a redelivery racing another finds the new run
		// open and is refused.
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		Memo:                                     memo,
		TypedSearchAttributes:                    timerSearchAttributes(courier.KindRowlessTimer, bizType, bizID, courier.TimerScheduled, now),
	}, courier.KindRowlessTimer.Workflow, workflows.TimerParams{BizType: bizType, BizID: bizID, FireAt: now, Payload: first.Payload, Version: t.Version + 1})
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		return api.Timer{}, notFailed(api.Timer{State: courier.TimerFiring})
	}
	if err != nil {
		return api.Timer{}, fmt.Errorf("start the redelivery: %w", err)
	}
	return api.Timer{BizType: bizType, BizID: bizID, State: courier.TimerScheduled, FireAt: now, Version: t.Version + 1,
		WorkflowID: id, Mode: courier.TimerModeWorkflow}, nil
}

// firstInput reads the timer's input from the first event of a run's history: the payload
// to deliver again (it is kept nowhere else).
func (s *Service) firstInput(ctx context.Context, id, runID string) (workflows.TimerParams, error) {
	var p workflows.TimerParams
	it := s.tc.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return p, fmt.Errorf("timer %s has no history", id)
	}
	ev, err := it.Next()
	if err != nil {
		return p, err
	}
	in := ev.GetWorkflowExecutionStartedEventAttributes().GetInput()
	if in == nil || len(in.GetPayloads()) == 0 {
		return p, fmt.Errorf("timer %s: its first event has no input", id)
	}
	err = converter.GetDefaultDataConverter().FromPayload(in.GetPayloads()[0], &p)
	return p, err
}

// RedeliverQuery selects failed timers for RedeliverFailed.
type RedeliverQuery struct {
	BizType                   string    // required
	FailedAfter, FailedBefore time.Time // when they failed; zero: any time
	Max                       int       // timers at most; 0: 100, at most 1000
}

// RedeliverResult says what a bulk redelivery did.
type RedeliverResult struct {
	Redelivered int
	Skipped     int  // matched, but redelivered meanwhile by someone else
	More        bool // failed timers matching the query remain beyond Max
}

// MaxRedeliver bounds one bulk redelivery.
const MaxRedeliver = 1000

// RedeliverFailed redelivers up to q.Max failed timers of a business type that failed in the
// window, timers of their own first, then bucketed ones.
func (s *Service) RedeliverFailed(ctx context.Context, q RedeliverQuery) (RedeliverResult, error) {
	var res RedeliverResult
	if err := courier.CheckName("biz_type", q.BizType); err != nil {
		return res, err
	}
	switch {
	case q.Max == 0:
		q.Max = 100
	case q.Max < 1 || q.Max > MaxRedeliver:
		return res, &courier.Error{Code: courier.CodeValidation, Message: fmt.Sprintf("max must be from 1 to %d", MaxRedeliver),
			Details: map[string]any{"field": "max"}}
	}
	if !q.FailedAfter.IsZero() && !q.FailedBefore.IsZero() && !q.FailedAfter.Before(q.FailedBefore) {
		return res, &courier.Error{Code: courier.CodeValidation, Message: "failed_after must be before failed_before",
			Details: map[string]any{"field": "failed_after"}}
	}
	lq := ListQuery{BizType: q.BizType, State: courier.TimerFailed, FinishedAfter: q.FailedAfter, FinishedBefore: q.FailedBefore, PageSize: q.Max}
	var token []byte
	for {
		page, next, err := s.List(ctx, lq, token)
		if err != nil {
			return res, err
		}
		for _, t := range page {
			if res.Redelivered+res.Skipped == q.Max {
				res.More = true
				return res, nil
			}
			_, err := s.Redeliver(ctx, t.BizType, t.BizID)
			if courier.ErrorCode(err) == courier.CodeConflict {
				res.Skipped++ // redelivered meanwhile, by someone else
				continue
			}
			if err != nil {
				return res, err
			}
			res.Redelivered++
		}
		if len(next) == 0 {
			return res, nil
		}
		token = next
	}
}
