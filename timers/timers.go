package timers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/tracing"
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

// TimerRows is what the timers' rows need from courier's database (store.Store): bucketed
// timers, and the rows that decide timers of their own.
type TimerRows interface {
	InsertTimers(ctx context.Context, recs []courier.TimerRecord) ([]courier.TimerInsert, error)
	GetTimerRecord(ctx context.Context, bizType, bizID string) (courier.TimerRecord, error)
	CancelTimerRecord(ctx context.Context, bizType, bizID string) (courier.TimerRecord, bool, error)
	RescheduleTimerRecord(ctx context.Context, bizType, bizID string, fireAt time.Time) (courier.TimerRecord, bool, error)
	RedeliverTimerRecord(ctx context.Context, bizType, bizID string) (courier.TimerRecord, bool, error)
	RedeliverTimerRun(ctx context.Context, bizType, bizID string) (courier.TimerRecord, bool, error)
	DeleteUnstartedTimer(ctx context.Context, bizType, bizID string) (bool, error)
	MarkTimerHanded(ctx context.Context, bizType, bizID string) error
	ListTimerRecords(ctx context.Context, f courier.TimerFilter) ([]courier.TimerRecord, bool, error)
}

// DefaultUpdateTimeout is how long a reschedule, cancel or Get of a timer without a row (one
// armed before rows were kept, or by a service without them) waits for its workflow to answer
// by default.
const DefaultUpdateTimeout = 10 * time.Second

// unavailableRetryAfter is the Retry-After of an update that timed out: long enough for a
// restarting worker to come back.
const unavailableRetryAfter = 5 * time.Second

// Service manages timers.
type Service struct {
	// UpdateTimeout bounds how long a reschedule, cancel or Get of a timer without a row waits
	// for the timer's workflow to take and answer it; that needs a running worker. Past it the
	// call fails with courier.CodeUnavailable and a RetryAfter (the change may still take
	// effect later, and repeating it is safe). Timers with a row (every timer a service with
	// rows arms) are answered by the database and never wait on it. Default
	// DefaultUpdateTimeout; set it before the first call.
	UpdateTimeout time.Duration
	// Logger reports what the service recovers from by itself (a bucket it could not arm, which
	// the sweep arms); default slog.Default(). Set it before the first call.
	Logger *slog.Logger

	tc        client.Client
	namespace string
	types     BizTypes
	rows      TimerRows // nil: no bucketed mode
	taskQueue string
	now       func() time.Time
	armed     armedBuckets
}

// New builds the service; taskQueue is where timer workflows run (courier's workflow queue).
// rows keeps the timers' rows: bucketed timers, and the rows that decide timers of their own.
// With nil, business types in the bucketed mode are refused and timers of their own live in
// Temporal only (their changes are workflow updates, which need a running worker).
func New(tc client.Client, namespace string, types BizTypes, rows TimerRows, taskQueue string) *Service {
	return &Service{tc: tc, namespace: namespace, types: types, rows: rows, taskQueue: taskQueue, now: time.Now,
		UpdateTimeout: DefaultUpdateTimeout, Logger: slog.Default()}
}

func validation(field, format string, args ...any) error {
	return &courier.Error{Code: courier.CodeValidation, Message: fmt.Sprintf(format, args...), Details: map[string]any{"field": field}}
}

// requestHash identifies a create request, so that a repeat is recognised: the fire time or
// the delay as given (never the instant a delay resolves to, which moves with the clock) and
// the payload. Timers created with a fire time keep the hash format they were created with.
func requestHash(fireAt time.Time, delay *time.Duration, payload []byte) string {
	h := sha256.New()
	if delay != nil {
		h.Write([]byte("delay:" + strconv.FormatInt(int64(*delay), 10)))
	} else {
		h.Write([]byte(fireAt.UTC().Format(time.RFC3339Nano)))
	}
	h.Write([]byte{0})
	h.Write(payload)
	return hex.EncodeToString(h.Sum(nil))
}

const (
	memoHash = "request_hash"
	// memoTraceParent is the creating request's W3C traceparent, for finding the timer's trace.
	memoTraceParent = "traceparent"
)

// Create arms a timer. The same request again returns the existing timer (created=false); a
// different request for the same (biz_type, biz_id) is a conflict, also after it fired. A delay
// counts from now; repeating a delay request is the same request: it returns the timer the
// first one created, with that one's fire time. The business type's mode decides where the
// timer lives: a workflow of its own, or a row delivered by its second's bucket.
func (s *Service) Create(ctx context.Context, r api.TimerRequest) (api.Timer, bool, error) {
	p, err := s.prepare(ctx, s.types, r)
	if err != nil {
		return api.Timer{}, false, err
	}
	if p.mode == courier.TimerModeBucketed {
		res := s.createBucketed(ctx, []prepared{p})
		return res[0].Timer, res[0].Created, res[0].Err
	}
	return s.createWorkflow(ctx, p)
}

// prepared is a create request checked and resolved: its type's mode, its fire time and the
// hash that recognises a repeat.
type prepared struct {
	req    api.TimerRequest
	mode   courier.TimerMode
	fireAt time.Time
	hash   string
}

// prepare checks a create request and resolves it against the business type and the clock.
func (s *Service) prepare(ctx context.Context, types BizTypes, r api.TimerRequest) (prepared, error) {
	if err := courier.CheckName("biz_type", r.BizType); err != nil {
		return prepared{}, err
	}
	if err := courier.CheckID("biz_id", r.BizID); err != nil {
		return prepared{}, err
	}
	b, err := types.GetBizType(ctx, r.BizType)
	if err != nil {
		if courier.ErrorCode(err) == courier.CodeNotFound {
			return prepared{}, validation("biz_type", "business type %q is not configured", r.BizType)
		}
		return prepared{}, err
	}
	if len(r.Payload) == 0 {
		r.Payload = json.RawMessage("null")
	}
	if len(r.Payload) > MaxPayloadBytes {
		return prepared{}, &courier.Error{Code: courier.CodeTooLarge, Message: fmt.Sprintf("payload is over %d bytes", MaxPayloadBytes),
			Details: map[string]any{"field": "payload", "limit_bytes": MaxPayloadBytes}}
	}
	if !json.Valid(r.Payload) {
		return prepared{}, validation("payload", "payload must be JSON")
	}
	at, delay, err := r.When.Resolve(s.now())
	switch {
	case err != nil:
		return prepared{}, err
	case delay != nil && *delay > MaxDelay:
		return prepared{}, validation("delay", "delay must be from 0 to %s", MaxDelay)
	case at.After(s.now().Add(MaxDelay)):
		return prepared{}, validation("fire_at", "fire_at must be within %s", MaxDelay)
	}
	p := prepared{req: r, mode: b.WithDefaults().TimerMode, fireAt: at.UTC().Truncate(time.Millisecond)}
	if delay != nil {
		p.hash = requestHash(time.Time{}, delay, r.Payload)
	} else {
		p.hash = requestHash(p.fireAt, nil, r.Payload)
	}
	if p.mode == courier.TimerModeBucketed && s.rows == nil {
		return prepared{}, validation("biz_type", "business type %q keeps bucketed timers, which this process cannot reach", r.BizType)
	}
	return p, nil
}

// createWorkflow arms a timer of its own: its row and its run (createRowTimer), or, without
// rows, its workflow alone, started with the request's hash in its memo so a repeat is
// recognised.
func (s *Service) createWorkflow(ctx context.Context, p prepared) (api.Timer, bool, error) {
	if s.rows != nil {
		return s.createRowTimer(ctx, p)
	}
	r, fireAt, hash := p.req, p.fireAt, p.hash
	id := courier.TimerWorkflowID(r.BizType, r.BizID)
	memo := map[string]any{memoHash: hash}
	if tc := tracing.FromContext(ctx); !tc.IsZero() {
		// The run itself continues the trace through Temporal's tracing interceptor (the
		// workflow's header); the memo shows the trace in the Temporal UI.
		memo[memoTraceParent] = tc.Parent
	}
	_, err := s.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                                       id,
		TaskQueue:                                courier.KindRowlessTimer.TaskQueue(s.taskQueue),
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		Memo:                                     memo,
		// With a worker on the same client (courier dev, the relay's timer rows), the first
		// workflow task comes back with the start instead of through matching.
		EnableEagerStart:      true,
		TypedSearchAttributes: timerSearchAttributes(courier.KindRowlessTimer, r.BizType, r.BizID, courier.TimerScheduled, fireAt),
	}, courier.KindRowlessTimer.Workflow, workflows.TimerParams{BizType: r.BizType, BizID: r.BizID, FireAt: fireAt, Payload: r.Payload})
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		existing, herr := s.memoHash(ctx, id)
		if herr != nil {
			return api.Timer{}, false, herr
		}
		if existing != hash {
			return api.Timer{}, false, conflict(id)
		}
		t, err := s.Get(ctx, r.BizType, r.BizID)
		return t, false, err
	}
	if err != nil {
		return api.Timer{}, false, fmt.Errorf("start timer: %w", err)
	}
	return api.Timer{BizType: r.BizType, BizID: r.BizID, State: courier.TimerScheduled, FireAt: fireAt,
		WorkflowID: id, Payload: r.Payload, Mode: courier.TimerModeWorkflow}, true, nil
}

// timerSearchAttributes are a timer run's search attributes at its start (a timer of its own
// or a bucketed timer's run of its own).
func timerSearchAttributes(kind courier.Kind, bizType, bizID string, state courier.TimerState, fireAt time.Time) temporal.SearchAttributes {
	return workflows.StartAttributes(kind, courier.RunAttributes{BizType: bizType, BizID: bizID, State: string(state), FireAt: fireAt})
}

// conflict answers a create that differs from the timer already under its key.
func conflict(workflowID string) error {
	return &courier.Error{Code: courier.CodeConflict, Message: "a different timer exists for this biz_type and biz_id",
		Details: map[string]any{"workflow_id": workflowID}}
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

// Get returns a timer's current state, wherever it lives: its row (a bucketed timer, a timer of
// its own with a row), or the workflow of a timer of its own without one.
func (s *Service) Get(ctx context.Context, bizType, bizID string) (api.Timer, error) {
	if rec, ok, err := s.row(ctx, bizType, bizID); ok || err != nil {
		return timerOfRecord(rec), err
	}
	return s.getWorkflow(ctx, bizType, bizID)
}

// getWorkflow reads a timer of its own from its workflow: the current run's state query, or
// the closed run's result or failure.
func (s *Service) getWorkflow(ctx context.Context, bizType, bizID string) (api.Timer, error) {
	id := courier.TimerWorkflowID(bizType, bizID)
	d, err := s.tc.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return api.Timer{}, notFound(bizType, bizID)
	}
	if err != nil {
		return api.Timer{}, err
	}
	var st workflows.TimerSnapshot
	switch d.GetWorkflowExecutionInfo().GetStatus() {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		// Without a run id the query reaches the timer's current run, whichever run that is.
		// Only a worker answers it, so it is bounded like an update.
		qctx, cancel := context.WithTimeout(ctx, s.updateTimeout())
		defer cancel()
		v, err := s.tc.QueryWorkflow(qctx, id, "", workflows.QueryTimerState)
		if err != nil && (qctx.Err() != nil || TimedOut(err)) {
			return api.Timer{}, s.unavailable(id)
		}
		if err != nil {
			return api.Timer{}, err
		}
		if err := v.Get(&st); err != nil {
			return api.Timer{}, err
		}
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		if err := s.tc.GetWorkflow(ctx, id, "").Get(ctx, &st); err != nil {
			return api.Timer{}, err
		}
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:
		// A failed delivery ends the run Failed (workflows.ErrTypeTimerFailed), its state in the
		// failure's details.
		err := s.tc.GetWorkflow(ctx, id, "").Get(ctx, nil)
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.Type() != workflows.ErrTypeTimerFailed || app.Details(&st) != nil {
			st = workflows.TimerSnapshot{State: courier.TimerFailed, LastError: "workflow failed"}
			if err != nil {
				st.LastError = "workflow failed: " + err.Error()
			}
			st.FireAt = searchTime(d.GetWorkflowExecutionInfo().GetSearchAttributes(), courier.SAFireAt)
		}
	default:
		st.State = courier.TimerFailed
		st.LastError = "workflow " + strings.ToLower(d.GetWorkflowExecutionInfo().GetStatus().String())
		st.FireAt = searchTime(d.GetWorkflowExecutionInfo().GetSearchAttributes(), courier.SAFireAt)
	}
	return snapshotTimer(bizType, bizID, st, id), nil
}

// snapshotTimer shows a timer run's snapshot.
func snapshotTimer(bizType, bizID string, st workflows.TimerSnapshot, workflowID string) api.Timer {
	return api.Timer{BizType: bizType, BizID: bizID, State: st.State, FireAt: st.FireAt.UTC(), Attempts: st.Attempts,
		LastError: st.LastError, Version: st.Version, WorkflowID: workflowID, Mode: courier.TimerModeWorkflow}
}

// Reschedule moves a scheduled timer; a timer that fired or was cancelled is a conflict.
func (s *Service) Reschedule(ctx context.Context, bizType, bizID string, fireAt time.Time) (api.Timer, error) {
	if fireAt.IsZero() {
		return api.Timer{}, validation("fire_at", "fire_at or delay is required")
	}
	if fireAt.After(s.now().Add(MaxDelay)) {
		return api.Timer{}, validation("fire_at", "fire_at must be within %s", MaxDelay)
	}
	fireAt = fireAt.UTC().Truncate(time.Millisecond)
	if t, found, err := s.rescheduleRow(ctx, bizType, bizID, fireAt); found || err != nil {
		return t, err
	}
	return s.update(ctx, bizType, bizID, workflows.UpdateReschedule, workflows.RescheduleRequest{FireAt: fireAt})
}

// Cancel cancels a scheduled timer; once acknowledged it never fires. Cancelling a cancelled
// timer is not an error: it returns the timer as it is, so a repeated cancel gets the answer
// the first one got. A timer that already fired is a conflict.
func (s *Service) Cancel(ctx context.Context, bizType, bizID string) (api.Timer, error) {
	if t, found, err := s.cancelRow(ctx, bizType, bizID); found || err != nil {
		return t, err
	}
	return s.update(ctx, bizType, bizID, workflows.UpdateCancel)
}

// closedConflict answers a change to a timer that already fired or was cancelled.
func closedConflict(t api.Timer) error {
	return &courier.Error{Code: courier.CodeConflict,
		Message: fmt.Sprintf("timer is %s; it cannot be changed", t.State), Details: map[string]any{"state": t.State}}
}

func (s *Service) update(ctx context.Context, bizType, bizID, name string, args ...any) (api.Timer, error) {
	id := courier.TimerWorkflowID(bizType, bizID)
	uctx, cancel := context.WithTimeout(ctx, s.updateTimeout())
	defer cancel()
	h, err := s.tc.UpdateWorkflow(uctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: name, Args: args, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var st workflows.TimerSnapshot
	if err == nil {
		err = h.Get(uctx, &st)
	}
	var nf *serviceerror.NotFound
	var app *temporal.ApplicationError
	switch {
	case err != nil && (uctx.Err() != nil || TimedOut(err)):
		return api.Timer{}, s.unavailable(id)
	case errors.As(err, &app) && app.Type() == workflows.ErrTypeTimerClosed, errors.As(err, &nf):
		// Fired or cancelled (nf: the workflow has finished), or unknown.
		t, gerr := s.Get(ctx, bizType, bizID)
		if gerr != nil {
			return api.Timer{}, gerr
		}
		if name == workflows.UpdateCancel && t.State == courier.TimerCancelled {
			return t, nil
		}
		return api.Timer{}, closedConflict(t)
	case err != nil:
		return api.Timer{}, err
	}
	return snapshotTimer(bizType, bizID, st, id), nil
}

func (s *Service) updateTimeout() time.Duration {
	if s.UpdateTimeout <= 0 {
		return DefaultUpdateTimeout
	}
	return s.UpdateTimeout
}

// TimedOut reports an error caused by a deadline, whether it surfaced as a context error or as
// a deadline from a gRPC call to Temporal (the server gives up on the call's own deadline a
// moment before the context ends: the SDK gives each gRPC call a share of the context's time).
// The timer service and the gateway both tell a slow dependency from a failure with it.
func TimedOut(err error) bool {
	var de *serviceerror.DeadlineExceeded
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &de) || status.Code(err) == codes.DeadlineExceeded
}

// unavailable is the answer when a timer's workflow did not answer in time: only a worker
// answers updates and queries, and none is running or none keeps up.
func (s *Service) unavailable(id string) error {
	return &courier.Error{Code: courier.CodeUnavailable,
		Message: fmt.Sprintf("the timer did not answer within %s (is a courier worker running?); "+
			"a change may still take effect, and repeating it is safe", s.updateTimeout()),
		Details: map[string]any{"workflow_id": id}, RetryAfter: unavailableRetryAfter}
}

// timerQuery selects timers of their own in visibility, with or without a row, one execution
// per timer: a timer that continued as new leaves closed runs behind that still say
// "scheduled"; only its current run counts.
var timerQuery = courier.KindIn(courier.KindTimer, courier.KindRowlessTimer) + " AND ExecutionStatus != 'ContinuedAsNew'"

// rowlessTimerQuery selects the timers of their own that keep no row: the rowless-timer kind's
// runs and the timer kind's armed before rows were kept, which are of the same workflow type
// (courier.KindTimer). A list reads the others from their rows, which hold the decided state.
var rowlessTimerQuery = fmt.Sprintf("%s AND WorkflowType = '%s'", timerQuery, courier.KindRowlessTimer.Workflow)

// ListQuery selects timers for List. Zero fields do not filter.
type ListQuery struct {
	BizType string
	State   courier.TimerState
	// FinishedAfter and FinishedBefore select timers by when they were delivered, failed or
	// cancelled (timers still scheduled or firing have no such time and are left out).
	FinishedAfter, FinishedBefore time.Time
	PageSize                      int // 1–1000; 0: 100
}

// listCursor is where a list continues: timers of their own (Temporal's page token) come
// first, then bucketed ones (courier's database).
type listCursor struct {
	Rows     bool      `json:"rows,omitempty"` // the workflows are done: on to the rows
	Temporal []byte    `json:"t,omitempty"`
	After    *rowAfter `json:"after,omitempty"`
}

// rowAfter is the last bucketed timer of a page, where the next page of rows starts
// (courier.TimerCursor).
type rowAfter struct {
	CreatedAt time.Time `json:"created_at"`
	BizType   string    `json:"biz_type"`
	BizID     string    `json:"biz_id"`
}

// List returns timers, optionally of one business type, state and finish time, a page at a
// time (pass the returned token back for the next page): timers of their own without a row
// (from Temporal's visibility) newest first, then timers with rows (bucketed ones and timers of
// their own, as their rows decided them) newest first. A page may hold fewer than PageSize timers (even none)
// while a next token follows.
func (s *Service) List(ctx context.Context, q ListQuery, token []byte) ([]api.Timer, []byte, error) {
	if q.BizType != "" {
		if err := courier.CheckName("biz_type", q.BizType); err != nil {
			return nil, nil, err
		}
	}
	if q.State != "" && !q.State.Valid() {
		return nil, nil, &courier.Error{Code: courier.CodeInvalid, Message: "state must be scheduled, firing, delivered, failed or cancelled",
			Details: map[string]any{"field": "state"}}
	}
	if q.PageSize <= 0 || q.PageSize > 1000 {
		q.PageSize = 100
	}
	var cur listCursor
	if len(token) > 0 {
		if err := json.Unmarshal(token, &cur); err != nil {
			return nil, nil, err // sealed by the gateway: never a caller's doing
		}
	}
	if !cur.Rows {
		items, next, err := s.listWorkflows(ctx, q, cur.Temporal)
		if err != nil || len(next) > 0 || s.rows == nil {
			return items, wrapCursor(listCursor{Temporal: next}, len(next) > 0), err
		}
		if len(items) > 0 {
			return items, wrapCursor(listCursor{Rows: true}, true), nil
		}
		// No timer of its own matches: the first page is the bucketed timers' first, not an
		// empty page with a token.
	}
	f := courier.TimerFilter{BizType: q.BizType, State: q.State, FinishedAfter: q.FinishedAfter, FinishedBefore: q.FinishedBefore, Limit: q.PageSize}
	if a := cur.After; a != nil {
		f.After = &courier.TimerCursor{CreatedAt: a.CreatedAt, BizType: a.BizType, BizID: a.BizID}
	}
	recs, more, err := s.rows.ListTimerRecords(ctx, f)
	if err != nil {
		return nil, nil, err
	}
	items := make([]api.Timer, len(recs))
	for i, r := range recs {
		items[i] = timerOfRecord(r)
	}
	if !more || len(recs) == 0 {
		return items, nil, nil
	}
	last := recs[len(recs)-1]
	return items, wrapCursor(listCursor{Rows: true, After: &rowAfter{CreatedAt: last.CreatedAt, BizType: last.BizType, BizID: last.BizID}}, true), nil
}

func wrapCursor(c listCursor, more bool) []byte {
	if !more {
		return nil
	}
	b, _ := json.Marshal(c)
	return b
}

// listWorkflows pages through the timers of their own in visibility: with rows, only those
// without one.
func (s *Service) listWorkflows(ctx context.Context, q ListQuery, token []byte) ([]api.Timer, []byte, error) {
	query := timerQuery
	if s.rows != nil {
		query = rowlessTimerQuery
	}
	if q.BizType != "" {
		query += fmt.Sprintf(" AND %s = '%s'", courier.SABizType, q.BizType)
	}
	if q.State != "" {
		query += fmt.Sprintf(" AND %s = '%s'", courier.SAState, q.State)
	}
	if !q.FinishedAfter.IsZero() {
		query += fmt.Sprintf(" AND CloseTime >= '%s'", q.FinishedAfter.UTC().Format(time.RFC3339Nano))
	}
	if !q.FinishedBefore.IsZero() {
		query += fmt.Sprintf(" AND CloseTime < '%s'", q.FinishedBefore.UTC().Format(time.RFC3339Nano))
	}
	resp, err := s.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: s.namespace, PageSize: int32(q.PageSize), NextPageToken: token, Query: query,
	})
	if err != nil {
		return nil, nil, err
	}
	out := make([]api.Timer, 0, len(resp.GetExecutions()))
	for _, e := range resp.GetExecutions() {
		sa := e.GetSearchAttributes()
		out = append(out, api.Timer{
			BizType: searchString(sa, courier.SABizType), BizID: searchString(sa, courier.SABizID),
			State: courier.TimerState(searchString(sa, courier.SAState)), FireAt: searchTime(sa, courier.SAFireAt),
			WorkflowID: e.GetExecution().GetWorkflowId(), Mode: courier.TimerModeWorkflow,
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
	for _, st := range courier.TimerStates {
		resp, err := s.tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
			Namespace: s.namespace,
			Query:     fmt.Sprintf("%s AND %s = '%s'", timerQuery, courier.SAState, st),
		})
		if err != nil {
			return nil, err
		}
		out[string(st)] = resp.GetCount()
	}
	return out, nil
}
