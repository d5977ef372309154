package timers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/workflows"
)

// MaxPayloadBytes bounds a timer's payload; it travels in workflow history.
const MaxPayloadBytes = 256 << 10

// MaxDelay is how far ahead a timer may be set.
const MaxDelay = 366 * 24 * time.Hour

// BizTypes is what the service needs to know about business types.
type BizTypes interface {
	GetBizType(ctx context.Context, name string) (courier.BizType, error)
}

// Service manages timers.
type Service struct {
	tc        client.Client
	namespace string
	types     BizTypes
	taskQueue string
	now       func() time.Time
}

// New builds the service; taskQueue is where timer workflows run (courier's workflow queue).
func New(tc client.Client, namespace string, types BizTypes, taskQueue string) *Service {
	return &Service{tc: tc, namespace: namespace, types: types, taskQueue: taskQueue, now: time.Now}
}

// Timer is a timer as the API shows it.
type Timer struct {
	BizType    string          `json:"biz_type"`
	BizID      string          `json:"biz_id"`
	State      string          `json:"state"`
	FireAt     time.Time       `json:"fire_at"`
	Attempts   int             `json:"attempts"`
	LastError  string          `json:"last_error,omitempty"`
	Version    int             `json:"version"`
	WorkflowID string          `json:"workflow_id"`
	Payload    json.RawMessage `json:"payload,omitempty"`
}

// CreateRequest arms a timer.
type CreateRequest struct {
	BizType string
	BizID   string
	FireAt  time.Time
	Payload json.RawMessage
}

func validation(field, format string, args ...any) error {
	return &courier.Error{Code: courier.CodeValidation, Message: fmt.Sprintf(format, args...), Details: map[string]any{"field": field}}
}

func requestHash(fireAt time.Time, payload []byte) string {
	h := sha256.New()
	h.Write([]byte(fireAt.UTC().Format(time.RFC3339Nano)))
	h.Write([]byte{0})
	h.Write(payload)
	return hex.EncodeToString(h.Sum(nil))
}

const memoHash = "request_hash"

// Create arms a timer. The same request again returns the existing timer (created=false); a
// different request for the same (biz_type, biz_id) is a conflict, also after it fired.
func (s *Service) Create(ctx context.Context, r CreateRequest) (Timer, bool, error) {
	if err := courier.CheckName("biz_type", r.BizType); err != nil {
		return Timer{}, false, err
	}
	if err := courier.CheckID("biz_id", r.BizID); err != nil {
		return Timer{}, false, err
	}
	if _, err := s.types.GetBizType(ctx, r.BizType); err != nil {
		if courier.ErrorCode(err) == courier.CodeNotFound {
			return Timer{}, false, validation("biz_type", "business type %q is not configured", r.BizType)
		}
		return Timer{}, false, err
	}
	if len(r.Payload) == 0 {
		r.Payload = json.RawMessage("null")
	}
	if len(r.Payload) > MaxPayloadBytes {
		return Timer{}, false, &courier.Error{Code: courier.CodeTooLarge, Message: fmt.Sprintf("payload is over %d bytes", MaxPayloadBytes)}
	}
	if !json.Valid(r.Payload) {
		return Timer{}, false, validation("payload", "payload must be JSON")
	}
	if r.FireAt.IsZero() {
		return Timer{}, false, validation("fire_at", "fire_at or delay is required")
	}
	if r.FireAt.After(s.now().Add(MaxDelay)) {
		return Timer{}, false, validation("fire_at", "fire_at must be within %s", MaxDelay)
	}
	fireAt := r.FireAt.UTC().Truncate(time.Millisecond)
	hash := requestHash(fireAt, r.Payload)
	id := courier.TimerWorkflowID(r.BizType, r.BizID)
	_, err := s.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                                       id,
		TaskQueue:                                s.taskQueue,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		Memo:                                     map[string]any{memoHash: hash},
		TypedSearchAttributes: temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(courier.SAKind).ValueSet("timer"),
			temporal.NewSearchAttributeKeyKeyword(courier.SABizType).ValueSet(r.BizType),
			temporal.NewSearchAttributeKeyKeyword(courier.SABizID).ValueSet(r.BizID),
			temporal.NewSearchAttributeKeyKeyword(courier.SAState).ValueSet(workflows.TimerScheduled),
			temporal.NewSearchAttributeKeyTime(courier.SAFireAt).ValueSet(fireAt),
		),
	}, workflows.TimerName, workflows.TimerParams{BizType: r.BizType, BizID: r.BizID, FireAt: fireAt, Payload: r.Payload})
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		existing, herr := s.memoHash(ctx, id)
		if herr != nil {
			return Timer{}, false, herr
		}
		if existing != hash {
			return Timer{}, false, &courier.Error{Code: courier.CodeConflict,
				Message: "a different timer exists for this biz_type and biz_id",
				Details: map[string]any{"workflow_id": id}}
		}
		t, err := s.Get(ctx, r.BizType, r.BizID)
		return t, false, err
	}
	if err != nil {
		return Timer{}, false, fmt.Errorf("start timer: %w", err)
	}
	return Timer{BizType: r.BizType, BizID: r.BizID, State: workflows.TimerScheduled, FireAt: fireAt,
		WorkflowID: id, Payload: r.Payload}, true, nil
}

func (s *Service) memoHash(ctx context.Context, id string) (string, error) {
	d, err := s.tc.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return "", err
	}
	var h string
	if p := d.GetWorkflowExecutionInfo().GetMemo().GetFields()[memoHash]; p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &h)
	}
	return h, nil
}

func notFound(bizType, bizID string) error {
	return courier.Errorf(courier.CodeNotFound, "no timer %s/%s", bizType, bizID)
}

// Get returns a timer's current state.
func (s *Service) Get(ctx context.Context, bizType, bizID string) (Timer, error) {
	id := courier.TimerWorkflowID(bizType, bizID)
	d, err := s.tc.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return Timer{}, notFound(bizType, bizID)
	}
	if err != nil {
		return Timer{}, err
	}
	var st workflows.TimerState
	switch d.GetWorkflowExecutionInfo().GetStatus() {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		v, err := s.tc.QueryWorkflow(ctx, id, "", workflows.QueryTimerState)
		if err != nil {
			return Timer{}, err
		}
		if err := v.Get(&st); err != nil {
			return Timer{}, err
		}
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		if err := s.tc.GetWorkflow(ctx, id, "").Get(ctx, &st); err != nil {
			return Timer{}, err
		}
	default:
		st.State = workflows.TimerFailed
		st.LastError = "workflow " + strings.ToLower(d.GetWorkflowExecutionInfo().GetStatus().String())
		st.FireAt = searchTime(d.GetWorkflowExecutionInfo().GetSearchAttributes(), courier.SAFireAt)
	}
	return Timer{BizType: bizType, BizID: bizID, State: st.State, FireAt: st.FireAt.UTC(), Attempts: st.Attempts,
		LastError: st.LastError, Version: st.Version, WorkflowID: id}, nil
}

// Reschedule moves a scheduled timer; a timer that fired or was cancelled is a conflict.
func (s *Service) Reschedule(ctx context.Context, bizType, bizID string, fireAt time.Time) (Timer, error) {
	if fireAt.IsZero() {
		return Timer{}, validation("fire_at", "fire_at or delay is required")
	}
	if fireAt.After(s.now().Add(MaxDelay)) {
		return Timer{}, validation("fire_at", "fire_at must be within %s", MaxDelay)
	}
	return s.update(ctx, bizType, bizID, workflows.UpdateReschedule, workflows.RescheduleRequest{FireAt: fireAt.UTC().Truncate(time.Millisecond)})
}

// Cancel cancels a scheduled timer; once acknowledged it never fires. A timer that already
// fired is a conflict.
func (s *Service) Cancel(ctx context.Context, bizType, bizID string) (Timer, error) {
	return s.update(ctx, bizType, bizID, workflows.UpdateCancel)
}

func (s *Service) update(ctx context.Context, bizType, bizID, name string, args ...any) (Timer, error) {
	id := courier.TimerWorkflowID(bizType, bizID)
	h, err := s.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: name, Args: args, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var st workflows.TimerState
	if err == nil {
		err = h.Get(ctx, &st)
	}
	var nf *serviceerror.NotFound
	var app *temporal.ApplicationError
	switch {
	case errors.As(err, &app) && app.Type() == workflows.ErrTypeTimerClosed:
		return Timer{}, &courier.Error{Code: courier.CodeConflict, Message: app.Error()}
	case errors.As(err, &nf):
		// Not running: either unknown, or finished (fired or cancelled).
		t, gerr := s.Get(ctx, bizType, bizID)
		if gerr != nil {
			return Timer{}, gerr
		}
		return Timer{}, &courier.Error{Code: courier.CodeConflict,
			Message: fmt.Sprintf("timer is %s; it cannot be changed", t.State), Details: map[string]any{"state": t.State}}
	case err != nil:
		return Timer{}, err
	}
	return Timer{BizType: bizType, BizID: bizID, State: st.State, FireAt: st.FireAt.UTC(), Attempts: st.Attempts,
		LastError: st.LastError, Version: st.Version, WorkflowID: id}, nil
}

// List returns timers of a business type, optionally in one state, newest first, a page at a
// time (pass the returned token back for the next page).
func (s *Service) List(ctx context.Context, bizType, state string, pageSize int, token []byte) ([]Timer, []byte, error) {
	q := fmt.Sprintf("%s = 'timer'", courier.SAKind)
	if bizType != "" {
		if err := courier.CheckName("biz_type", bizType); err != nil {
			return nil, nil, err
		}
		q += fmt.Sprintf(" AND %s = '%s'", courier.SABizType, bizType)
	}
	if state != "" {
		switch state {
		case workflows.TimerScheduled, workflows.TimerFiring, workflows.TimerDelivered, workflows.TimerFailed, workflows.TimerCancelled:
		default:
			return nil, nil, courier.Errorf(courier.CodeInvalid, "state must be scheduled, firing, delivered, failed or cancelled")
		}
		q += fmt.Sprintf(" AND %s = '%s'", courier.SAState, state)
	}
	if pageSize <= 0 || pageSize > 1000 {
		pageSize = 100
	}
	resp, err := s.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: s.namespace, PageSize: int32(pageSize), NextPageToken: token, Query: q,
	})
	if err != nil {
		return nil, nil, err
	}
	out := make([]Timer, 0, len(resp.GetExecutions()))
	for _, e := range resp.GetExecutions() {
		sa := e.GetSearchAttributes()
		out = append(out, Timer{
			BizType: searchString(sa, courier.SABizType), BizID: searchString(sa, courier.SABizID),
			State: searchString(sa, courier.SAState), FireAt: searchTime(sa, courier.SAFireAt),
			WorkflowID: e.GetExecution().GetWorkflowId(),
		})
	}
	return out, resp.GetNextPageToken(), nil
}

func searchString(sa *commonpb.SearchAttributes, name string) string {
	var v string
	if p := sa.GetIndexedFields()[name]; p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &v)
	}
	return v
}

func searchTime(sa *commonpb.SearchAttributes, name string) time.Time {
	var v time.Time
	if p := sa.GetIndexedFields()[name]; p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &v)
	}
	return v.UTC()
}

// CountByState counts timers in each state (for metrics).
func (s *Service) CountByState(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	for _, st := range []string{workflows.TimerScheduled, workflows.TimerFiring, workflows.TimerDelivered, workflows.TimerFailed, workflows.TimerCancelled} {
		resp, err := s.tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
			Namespace: s.namespace,
			Query:     fmt.Sprintf("%s = 'timer' AND %s = '%s'", courier.SAKind, courier.SAState, st),
		})
		if err != nil {
			return nil, err
		}
		out[st] = resp.GetCount()
	}
	return out, nil
}
