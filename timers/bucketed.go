package timers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/tracing"
	"github.com/courier-oss/courier/workflows"
)

// BatchResult is how one timer of a batch create ended: created, found (a repeat), or refused
// with Err (nothing of it written).
type BatchResult struct {
	Timer   api.Timer
	Created bool
	Err     error
}

// MaxBatch is how many timers one batch create takes.
const MaxBatch = 1000

// CreateBatch arms many timers at once, each checked and answered on its own: an invalid one
// is refused without refusing the others. Timers of bucketed types are stored in one
// transaction (their buckets armed once per bucket), the others started one by one, so every
// timer is either armed or not written at all.
func (s *Service) CreateBatch(ctx context.Context, reqs []api.TimerRequest) ([]BatchResult, error) {
	if len(reqs) > MaxBatch {
		return nil, &courier.Error{Code: courier.CodeValidation, Message: fmt.Sprintf("a batch holds at most %d timers", MaxBatch),
			Details: map[string]any{"field": "timers", "limit": MaxBatch}}
	}
	out := make([]BatchResult, len(reqs))
	var bucketed []prepared
	var at []int // out's index of each of bucketed
	var wg sync.WaitGroup
	sem := make(chan struct{}, workflowStartsAtOnce)
	types := &batchBizTypes{from: s.types, read: map[string]bizTypeRead{}}
	for i, r := range reqs {
		p, err := s.prepare(ctx, types, r)
		switch {
		case err != nil:
			out[i].Err = err
		case p.mode == courier.TimerModeBucketed:
			bucketed, at = append(bucketed, p), append(at, i)
		default:
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				out[i].Timer, out[i].Created, out[i].Err = s.createWorkflow(ctx, p)
			})
		}
	}
	wg.Wait()
	for j, res := range s.createBucketed(ctx, bucketed) {
		out[at[j]] = res
	}
	return out, nil
}

// batchBizTypes reads each business type of one batch once: a batch of 1,000 timers of one
// type is one read, not 1,000.
type batchBizTypes struct {
	from BizTypes
	read map[string]bizTypeRead
}

type bizTypeRead struct {
	b   courier.BizType
	err error
}

func (t *batchBizTypes) GetBizType(ctx context.Context, name string) (courier.BizType, error) {
	if r, ok := t.read[name]; ok {
		return r.b, r.err
	}
	b, err := t.from.GetBizType(ctx, name)
	t.read[name] = bizTypeRead{b: b, err: err}
	return b, err
}

// workflowStartsAtOnce bounds the workflow starts one batch create makes at once.
const workflowStartsAtOnce = 8

// createBucketed stores bucketed timers in one transaction and arms their buckets.
func (s *Service) createBucketed(ctx context.Context, ps []prepared) []BatchResult {
	out := make([]BatchResult, len(ps))
	if len(ps) == 0 {
		return out
	}
	tc := tracing.FromContext(ctx)
	recs := make([]courier.TimerRecord, len(ps))
	for i, p := range ps {
		recs[i] = courier.TimerRecord{BizType: p.req.BizType, BizID: p.req.BizID, FireAt: p.fireAt, Payload: p.req.Payload,
			RequestHash: p.hash, Trace: tc}
	}
	ins, err := s.rows.InsertTimers(ctx, recs)
	if err != nil {
		for i := range out {
			out[i].Err = fmt.Errorf("store timers: %w", err)
		}
		return out
	}
	buckets := map[courier.TimerKey]int64{} // one arm per bucket: the key's BizID is unused
	for i, in := range ins {
		switch {
		case in.Conflict:
			out[i].Err = conflict(courier.TimerBucketWorkflowID(in.Record.BizType, courier.TimerBucket(in.Record.FireAt)))
			continue
		case in.Created:
			buckets[courier.TimerKey{BizType: in.Record.BizType, BizID: fmt.Sprint(courier.TimerBucket(in.Record.FireAt))}] =
				courier.TimerBucket(in.Record.FireAt)
		}
		out[i].Timer, out[i].Created = timerOfRecord(in.Record), in.Created
		out[i].Timer.Payload = in.Record.Payload
	}
	for k, bucket := range buckets {
		// A bucket whose start failed is armed by the sweep (OverdueTimerBuckets) once its
		// timers are overdue: the timers are stored, so they are acknowledged.
		if err := s.ArmBucket(ctx, k.BizType, bucket); err != nil && ctx.Err() == nil {
			s.Logger.WarnContext(ctx, "arming a timer bucket failed; the sweep will arm it", "biz_type", k.BizType, "bucket", bucket, "error", err)
		}
	}
	return out
}

// armAhead is how far ahead a bucket must be for the service to trust that the workflow it
// started for it is still asleep; nearer buckets are started every time (a no-op while their
// run is open), since their run may have finished already.
const armAhead = 5 * time.Second

// armedBuckets remembers the buckets this process armed that are still far enough ahead, so
// creating many timers in one second starts its workflow once.
type armedBuckets struct {
	mu   sync.Mutex
	seen map[courier.TimerKey]time.Time // by type and bucket (as the key's BizID): when it fires
}

// ArmBucket starts the workflow of a business type's bucket, unless it is running: a start
// is idempotent (the run open for the bucket is kept; a bucket whose run has ended gets a new
// one, which delivers whatever is due).
func (s *Service) ArmBucket(ctx context.Context, bizType string, bucket int64) error {
	key := courier.TimerKey{BizType: bizType, BizID: fmt.Sprint(bucket)}
	fires := time.Unix(bucket, 0)
	if s.armed.has(key, s.now()) {
		return nil
	}
	_, err := s.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       courier.TimerBucketWorkflowID(bizType, bucket),
		TaskQueue:                courier.KindTimerBucket.TaskQueue(s.taskQueue),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		TypedSearchAttributes:    workflows.StartAttributes(courier.KindTimerBucket, courier.RunAttributes{BizType: bizType, FireAt: fires}),
	}, courier.KindTimerBucket.Workflow, workflows.TimerBucketParams{BizType: bizType, Bucket: bucket})
	if err != nil {
		return err
	}
	if fires.Sub(s.now()) > armAhead {
		s.armed.add(key, fires, s.now())
	}
	return nil
}

func (a *armedBuckets) has(k courier.TimerKey, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	fires, ok := a.seen[k]
	return ok && fires.Sub(now) > armAhead
}

func (a *armedBuckets) add(k courier.TimerKey, fires, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen == nil {
		a.seen = map[courier.TimerKey]time.Time{}
	}
	if len(a.seen) > 100_000 { // forget what has come due; far more buckets ahead is unusual
		for k, f := range a.seen {
			if f.Sub(now) <= armAhead {
				delete(a.seen, k)
			}
		}
	}
	a.seen[k] = fires
}

// row reads a timer's row; ok is false when there is none.
func (s *Service) row(ctx context.Context, bizType, bizID string) (courier.TimerRecord, bool, error) {
	if s.rows == nil {
		return courier.TimerRecord{}, false, nil
	}
	rec, err := s.rows.GetTimerRecord(ctx, bizType, bizID)
	if courier.ErrorCode(err) == courier.CodeNotFound {
		return rec, false, nil
	}
	return rec, err == nil, err
}

// timerOfRecord shows a timer from its row: a bucketed timer (its bucket's workflow) or a timer
// of its own (its own workflow).
func timerOfRecord(r courier.TimerRecord) api.Timer {
	t := api.Timer{BizType: r.BizType, BizID: r.BizID, State: r.State, FireAt: r.FireAt.UTC(), Attempts: r.Attempts,
		LastError: r.LastError, Version: r.Version, Mode: courier.TimerModeBucketed,
		WorkflowID: courier.TimerBucketWorkflowID(r.BizType, courier.TimerBucket(r.FireAt))}
	if r.Mode == courier.TimerModeWorkflow {
		t.Mode, t.WorkflowID = courier.TimerModeWorkflow, courier.TimerWorkflowID(r.BizType, r.BizID)
	}
	return t
}

// changeRow runs change, a change of a timer's row; found is false when the timer has no row
// (or the service keeps none).
func (s *Service) changeRow(change func() (courier.TimerRecord, bool, error)) (rec courier.TimerRecord, changed, found bool, err error) {
	if s.rows == nil {
		return rec, false, false, nil
	}
	rec, changed, err = change()
	switch {
	case courier.ErrorCode(err) == courier.CodeNotFound:
		return rec, false, false, nil
	case err != nil:
		return rec, false, true, err
	}
	return rec, changed, true, nil
}

// cancelRow cancels a timer in its row, and tells a timer of its own's run; found is false when
// the timer has no row.
func (s *Service) cancelRow(ctx context.Context, bizType, bizID string) (api.Timer, bool, error) {
	rec, changed, found, err := s.changeRow(func() (courier.TimerRecord, bool, error) {
		return s.rows.CancelTimerRecord(ctx, bizType, bizID)
	})
	if !found || err != nil {
		return api.Timer{}, found, err
	}
	t := timerOfRecord(rec)
	if !changed && rec.State != courier.TimerCancelled {
		return api.Timer{}, true, closedConflict(t)
	}
	if changed && rec.Mode == courier.TimerModeWorkflow {
		s.tellRun(ctx, rec)
	}
	return t, true, nil
}

// rescheduleRow moves a timer in its row, and arms a bucketed timer's new bucket or tells a
// timer of its own's run; found is false when the timer has no row.
func (s *Service) rescheduleRow(ctx context.Context, bizType, bizID string, fireAt time.Time) (api.Timer, bool, error) {
	rec, changed, found, err := s.changeRow(func() (courier.TimerRecord, bool, error) {
		return s.rows.RescheduleTimerRecord(ctx, bizType, bizID, fireAt)
	})
	if !found || err != nil {
		return api.Timer{}, found, err
	}
	t := timerOfRecord(rec)
	if !changed {
		return api.Timer{}, true, closedConflict(t)
	}
	if rec.Mode == courier.TimerModeWorkflow {
		s.tellRun(ctx, rec)
		return t, true, nil
	}
	if err := s.ArmBucket(ctx, bizType, courier.TimerBucket(rec.FireAt)); err != nil && ctx.Err() == nil {
		s.Logger.WarnContext(ctx, "arming a timer bucket failed; the sweep will arm it", "biz_type", bizType, "bucket", courier.TimerBucket(rec.FireAt), "error", err)
	}
	return t, true, nil
}

// HandOver gives a bucketed timer to a timer run of its own (timer/<biz_type>/<biz_id>): the
// rest of its type's retry budget after a failed attempt in its bucket (or nothing to retry,
// when the failure was permanent), or a whole new budget after a redelivery; the run records
// how the delivery ended in the row. A bucket's hand-over repeated while its run is open is a
// no-op. A redelivery (no attempts made yet) waits for the previous delivery's run, which
// records its end a moment before it closes, to close first.
func (s *Service) HandOver(ctx context.Context, rec courier.TimerRecord, lastError string, permanent bool) error {
	id := courier.TimerWorkflowID(rec.BizType, rec.BizID)
	opts := client.StartWorkflowOptions{
		ID:                                       id,
		TaskQueue:                                courier.KindBucketedTimer.TaskQueue(s.taskQueue),
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TypedSearchAttributes:                    timerSearchAttributes(courier.KindBucketedTimer, rec.BizType, rec.BizID, courier.TimerFiring, rec.FireAt),
	}
	params := workflows.TimerParams{BizType: rec.BizType, BizID: rec.BizID, FireAt: rec.FireAt, Payload: rec.Payload, Version: rec.Version,
		HandOver: &workflows.TimerHandOver{Attempts: rec.Attempts, LastError: lastError, Permanent: permanent, DeliveryID: rec.DeliveryID}}
	for {
		_, err := s.tc.ExecuteWorkflow(ctx, opts, courier.KindBucketedTimer.Workflow, params)
		var already *serviceerror.WorkflowExecutionAlreadyStarted
		if !errors.As(err, &already) {
			return err
		}
		if rec.Attempts > 0 {
			return nil // this firing's run, started by an earlier try of the same hand-over
		}
		// The previous delivery's run is closing: wait for it, then start the new one.
		wctx, cancel := context.WithTimeout(ctx, handOverWait)
		_ = s.tc.GetWorkflow(wctx, id, "").Get(wctx, nil) // its outcome is the previous delivery's
		timedOut := wctx.Err() != nil
		cancel()
		if timedOut && ctx.Err() == nil {
			return &courier.Error{Code: courier.CodeUnavailable, RetryAfter: time.Second,
				Message: fmt.Sprintf("the timer's previous delivery (%s) has not closed yet; repeat the request in a moment", id)}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// handOverWait bounds how long a redelivery waits for the previous delivery's run to close.
const handOverWait = 10 * time.Second
