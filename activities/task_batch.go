package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/callback"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/tracing"
	"github.com/courier-oss/courier/webhook"
)

// pushOutcome is how one attempt's push in a batch ended: taken by the worker, or not, with
// the outcome its attempt ends with.
type pushOutcome struct {
	taken   bool
	refused bool // by the worker, in its answer (otherwise the push failed on the way)
	handed  bool // its request failed on the way and was handed to a run of its own (handOff)
	outcome contract.AttemptOutcome
}

// PushBatch pushes a batch run's attempts (contract.PushBatchName). It marks the attempts
// still due pushed, in one statement that also starts their deadlines, then sends them to the
// queue's worker endpoint, push_batch_size to a request (as the claim recorded it), the
// requests at once within this process's push slots. A request that fails on the way is tried
// again as one push is (up to courier.PushTries tries, after the worker's Retry-After, never
// past the earliest deadline it carries); an attempt the worker refuses, or whose request
// still failed, ends as a failure without holding the others. A repeat after a crash pushes
// only what is still due, each attempt with the same delivery id and in a request with the
// same webhook-id as before (the requests group the run's attempts by their place in its
// input, not by what is still due), its deadline unchanged.
func (a *Tasks) PushBatch(ctx context.Context, p contract.PushBatchParams) (contract.PushBatchResult, error) {
	var res contract.PushBatchResult
	try := p.PushTimeout
	if try <= 0 {
		try = courier.DefaultPushTimeout
	}
	attempts := make([]store.BatchAttempt, len(p.Attempts))
	for i, at := range p.Attempts {
		attempts[i] = store.BatchAttempt{TaskID: at.TaskID, Version: at.Version, Attempt: at.Attempt,
			ProcessingTimeout: at.ProcessingTimeout, HeartbeatTimeout: at.HeartbeatTimeout, Pushing: try}
	}
	tasks, err := a.store.MarkBatchPushed(ctx, p.Batch, attempts)
	if err != nil {
		// Tried again by the run until the database answers; said once per try, since the
		// batch's attempts wait meanwhile.
		activity.GetLogger(ctx).Warn("mark a task batch pushed (tried again)", "batch", p.Batch, "error", err)
		return res, fmt.Errorf("mark the batch pushed: %w", err)
	}
	res.Stale = len(p.Attempts) - len(tasks)
	if len(tasks) == 0 {
		return res, nil
	}
	q, err := a.store.GetQueue(ctx, p.Queue)
	if err != nil {
		return res, fmt.Errorf("read queue %q: %w", p.Queue, err)
	}
	size := p.PushBatchSize
	if size <= 0 {
		size = q.PushBatchSize
	}
	p.PushBatchSize = max(size, 1)
	chunks := chunksOf(p.Attempts, p.PushBatchSize, tasks)
	if p.WebhookID != "" && len(chunks) == 1 {
		chunks[0].id = p.WebhookID // the request a run of tries sends again
	}
	outcomes := make([]pushOutcome, len(tasks))
	if q.PushURL == "" {
		for i := range outcomes {
			outcomes[i] = pushOutcome{outcome: contract.AttemptOutcome{Kind: courier.OutcomeFailure,
				Message: fmt.Sprintf("push failed: queue %q has no push_url", q.Name)}}
		}
	} else {
		a.sendBatch(ctx, q, p, chunks, tasks, outcomes)
	}
	for i, t := range tasks {
		o := outcomes[i]
		switch {
		case o.taken:
			res.Pushed++
			a.observePushed(t, t.Attempt)
			continue
		case o.handed:
			res.Handed++
			continue
		case o.refused:
			res.Refused++
		default:
			res.Failed++
		}
		if err := a.endAttempt(ctx, t, o.outcome); err != nil {
			return res, err
		}
	}
	return res, nil
}

// endAttempt ends an attempt whose push did not reach its worker, as a failure.
func (a *Tasks) endAttempt(ctx context.Context, t courier.Task, o contract.AttemptOutcome) error {
	fr, err := a.store.FinishTaskAttempt(ctx, t.TaskID, t.Version, t.Attempt, o)
	if err != nil {
		return fmt.Errorf("end attempt %d of task %q version %d: %w", t.Attempt, t.TaskID, t.Version, err)
	}
	if fr.Applied {
		if a.metrics != nil {
			a.metrics.Results.WithLabelValues(t.Queue, string(o.Kind)).Inc()
		}
		a.wake()
	}
	return nil
}

// pushChunk is one request of a batch's push: where its attempts are in the tasks being
// pushed, in order, and its webhook-id.
type pushChunk struct {
	start, end int // tasks[start:end]
	id         string
	batched    bool // an api.TaskPushBatch, not a single push
}

// chunksOf groups the run's attempts size to a request by their place in its input, so that
// the request carrying an attempt has the same webhook-id on every push of it: a single push's
// is its attempt's delivery id, a batched push's is derived from every attempt of its group,
// also those no longer due. It orders tasks (the attempts still due, in the database's order)
// as the requests carry them, and returns the requests.
func chunksOf(attempts []contract.BatchAttempt, size int, tasks []courier.Task) []pushChunk {
	type key struct {
		id      string
		version int64
		attempt int
	}
	place := make(map[key]int, len(attempts))
	for i, at := range attempts {
		place[key{at.TaskID, at.Version, at.Attempt}] = i
	}
	// An attempt the input does not name (never: the database returns only the input's) goes
	// after them, in a group of its own.
	pos := make(map[key]int, len(tasks))
	for i, t := range tasks {
		k := key{t.TaskID, t.Version, t.Attempt}
		p, ok := place[k]
		if !ok {
			p = len(attempts) + size*(len(attempts)+i)
		}
		pos[k] = p
	}
	posOf := func(t courier.Task) int { return pos[key{t.TaskID, t.Version, t.Attempt}] }
	sort.SliceStable(tasks, func(i, j int) bool { return posOf(tasks[i]) < posOf(tasks[j]) })
	deliveryID := func(id string, version int64, attempt int) string {
		return courier.TaskAttemptDeliveryID(id, version, attempt)
	}
	var chunks []pushChunk
	for i := 0; i < len(tasks); {
		group := posOf(tasks[i]) / size
		j := i + 1
		for j < len(tasks) && posOf(tasks[j])/size == group {
			j++
		}
		c := pushChunk{start: i, end: j, batched: size > 1}
		switch {
		case !c.batched:
			c.id = deliveryID(tasks[i].TaskID, tasks[i].Version, tasks[i].Attempt)
		case group*size < len(attempts):
			ids := make([]string, 0, size)
			for _, at := range attempts[group*size : min((group+1)*size, len(attempts))] {
				ids = append(ids, deliveryID(at.TaskID, at.Version, at.Attempt))
			}
			c.id = chunkDeliveryID(ids)
		default:
			c.id = chunkDeliveryID([]string{deliveryID(tasks[i].TaskID, tasks[i].Version, tasks[i].Attempt)})
		}
		chunks = append(chunks, c)
		i = j
	}
	return chunks
}

// sendBatch sends tasks to q's endpoint, a request per chunk, and fills outcomes.
func (a *Tasks) sendBatch(ctx context.Context, q courier.Queue, p contract.PushBatchParams, chunks []pushChunk, tasks []courier.Task, outcomes []pushOutcome) {
	var signer *webhook.Signer
	if len(q.Secrets) > 0 {
		s, err := webhook.NewSigner(q.Secrets...)
		if err != nil {
			for i := range outcomes {
				outcomes[i] = pushOutcome{outcome: contract.AttemptOutcome{Kind: courier.OutcomeFailure, Message: "push failed: " + err.Error()}}
			}
			return
		}
		signer = s
	}
	timeout := q.PushTimeout
	if timeout <= 0 {
		timeout = courier.DefaultPushTimeout
	}
	cl := a.client(q, timeout)
	var wg sync.WaitGroup
	for i, c := range chunks {
		if a.localPushes != nil {
			select {
			case a.localPushes <- struct{}{}:
			case <-ctx.Done():
				for i := c.start; i < len(tasks); i++ {
					outcomes[i] = pushOutcome{outcome: contract.AttemptOutcome{Kind: courier.OutcomeFailure, Message: "push failed: " + ctx.Err().Error()}}
				}
				wg.Wait()
				return
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if a.localPushes != nil {
				defer func() { <-a.localPushes }()
			}
			a.sendChunk(ctx, cl, q, signer, p, i, c, tasks[c.start:c.end], outcomes[c.start:c.end])
		}()
	}
	wg.Wait()
}

// sendChunk sends one request: a single push (api.TaskPush) or a batched push
// (api.TaskPushBatch), as c says, with the tries of one push.
func (a *Tasks) sendChunk(ctx context.Context, cl *callback.Client, q courier.Queue, signer *webhook.Signer, p contract.PushBatchParams,
	idx int, c pushChunk, tasks []courier.Task, outcomes []pushOutcome) {
	batch := p.Batch
	pushes := make([]api.TaskPush, len(tasks))
	deadline := time.Time{}
	for i, t := range tasks {
		pushes[i] = a.taskPush(t)
		if deadline.IsZero() || pushes[i].Deadline.Before(deadline) {
			deadline = pushes[i].Deadline
		}
	}
	spans := startPushSpans(ctx, tasks, batch)
	defer func() {
		for _, s := range spans {
			if s != nil {
				s.End()
			}
		}
	}()
	var (
		body    []byte
		err     error
		sendCtx = ctx
	)
	if !c.batched {
		if spans[0] != nil {
			// A single push is its task's: its request carries the task's trace to the worker.
			sendCtx = trace.ContextWithSpan(ctx, spans[0])
		}
		body, err = json.Marshal(pushes[0])
	} else {
		// A batched request is traced in the batch run's trace; each push in it carries its
		// own task's, for the worker to continue.
		for i, s := range spans {
			if s != nil {
				tc := tracing.FromContext(trace.ContextWithSpan(ctx, s))
				pushes[i].Traceparent, pushes[i].Tracestate = tc.Parent, tc.State
			}
		}
		body, err = json.Marshal(api.TaskPushBatch{Tasks: pushes, ResultsURL: a.resultsURL()})
	}
	if err != nil {
		fail(outcomes, "push failed: "+err.Error(), 0, false)
		return
	}
	req := callback.Request{URL: q.PushURL, Body: body, Signer: signer, DeliveryID: c.id}
	// The heartbeat timeouts of the request's attempts run from the worker's answer: before a
	// try again they leave room for the wait and the try, once answered they start.
	var beating []store.AttemptKey
	for _, t := range tasks {
		if t.AttemptHeartbeatTimeout > 0 {
			beating = append(beating, store.AttemptKey{TaskID: t.TaskID, Version: t.Version, Attempt: t.Attempt})
		}
	}
	startHeartbeats := func(after time.Duration) {
		if len(beating) == 0 {
			return
		}
		if err := a.store.StartBatchedHeartbeats(ctx, beating, after); err != nil {
			// The attempts keep the timeout their mark gave them (the push's first try and the
			// heartbeat timeout), and a heartbeat from the worker moves it on.
			activity.GetLogger(ctx).Warn("start the heartbeat timeouts of pushed attempts", "batch", batch, "error", err)
		}
	}
	try := q.PushTimeout
	if try <= 0 {
		try = courier.DefaultPushTimeout
	}
	handed := false
	answer, err := sendTries(sendCtx, cl, req, deadline, max(p.Try, 1), func(next int, wait time.Duration) bool {
		if a.retryPush != nil && a.handOff(ctx, p, idx, c, tasks, next, wait, try) {
			handed = true
			return false
		}
		startHeartbeats(wait + try)
		return true
	})
	if handed {
		for i := range outcomes {
			outcomes[i] = pushOutcome{handed: true}
		}
		return
	}
	if err != nil {
		var ce *callback.Error
		code := 0
		if errors.As(err, &ce) {
			code = ce.Status
		}
		fail(outcomes, "push failed: "+err.Error(), code, false)
		return
	}
	for i := range outcomes {
		outcomes[i] = pushOutcome{taken: true}
	}
	startHeartbeats(0)
	if !c.batched || len(answer) == 0 {
		return
	}
	var ans api.TaskPushBatchAnswer
	if err := json.Unmarshal(answer, &ans); err != nil {
		return // a 2xx whose body is not an answer takes every attempt, as an empty one does
	}
	for _, r := range ans.Refused {
		for i, t := range tasks {
			if t.TaskID == r.TaskID && t.Version == r.TaskVersion && t.Attempt == r.Attempt {
				msg := "push refused by the worker"
				if r.Message != "" {
					msg += ": " + r.Message
				}
				outcomes[i] = pushOutcome{refused: true, outcome: contract.AttemptOutcome{Kind: courier.OutcomeFailure, StatusCode: r.StatusCode, Message: msg}}
			}
		}
	}
}

// sendTries sends req, trying again what failed on the way as one push's tries do: up to
// courier.PushTries tries, after the worker's Retry-After when it sent one (one over
// contract.PushRetryMax fails at once), never past deadline. first is the try it makes first;
// before each try again, retrying is told its number and the wait before it, and ends the tries
// when it answers false (the request was handed on).
func sendTries(ctx context.Context, cl *callback.Client, req callback.Request, deadline time.Time, first int,
	retrying func(next int, wait time.Duration) bool) ([]byte, error) {
	for try := first; ; try++ {
		answer, err := cl.SendRead(ctx, req)
		var ce *callback.Error
		if err == nil || !errors.As(err, &ce) || !ce.Retryable || try >= courier.PushTries {
			return answer, err
		}
		wait := contract.PushBackoff(try)
		if ce.RetryAfter > 0 {
			if ce.RetryAfter > contract.PushRetryMax {
				return nil, err
			}
			wait = ce.RetryAfter
		}
		if time.Now().Add(wait).After(deadline) {
			return nil, err
		}
		if !retrying(try+1, wait) {
			return nil, err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, err
		}
	}
}

func fail(outcomes []pushOutcome, msg string, code int, refused bool) {
	for i := range outcomes {
		outcomes[i] = pushOutcome{refused: refused, outcome: contract.AttemptOutcome{Kind: courier.OutcomeFailure, StatusCode: code, Message: msg}}
	}
}

// handOff hands the attempts of a request that failed on the way (the idx-th of p's run) to a
// run of their own, which makes try next after wait (contract.PushBatchParams.Try) with the
// request's webhook-id, so that this run ends without waiting for it, as a bucketed timer
// whose delivery failed leaves its bucket. The attempts move to the new run's batch first
// (their heartbeat timeouts, if any, left room for the wait and the try), so this run's repeat
// after a crash no longer pushes them. false: the hand-off failed, and this run makes the try
// itself.
func (a *Tasks) handOff(ctx context.Context, p contract.PushBatchParams, idx int, c pushChunk, tasks []courier.Task,
	next int, wait, try time.Duration) bool {
	to := fmt.Sprintf("%s.%d.try%d", p.Batch, idx, next)
	byKey := make(map[store.AttemptKey]contract.BatchAttempt, len(p.Attempts))
	for _, at := range p.Attempts {
		byKey[store.AttemptKey{TaskID: at.TaskID, Version: at.Version, Attempt: at.Attempt}] = at
	}
	rp := contract.PushBatchParams{Queue: p.Queue, Batch: to, PushTimeout: p.PushTimeout, PushBatchSize: p.PushBatchSize,
		Try: next, WebhookID: c.id}
	keys := make([]store.AttemptKey, 0, len(tasks))
	for _, t := range tasks {
		k := store.AttemptKey{TaskID: t.TaskID, Version: t.Version, Attempt: t.Attempt}
		if at, ok := byKey[k]; ok {
			keys = append(keys, k)
			rp.Attempts = append(rp.Attempts, at)
		}
	}
	if len(keys) < len(tasks) {
		return false // an attempt the input does not name (never): keep its tries here
	}
	moved, err := a.store.MoveBatchedAttempts(ctx, p.Batch, to, keys, wait+try)
	if err != nil {
		activity.GetLogger(ctx).Warn("hand a failed push to a run of its own (tried again in its batch)", "batch", p.Batch, "error", err)
		return false
	}
	if moved == 0 {
		return true // every attempt moved on meanwhile (a result, a cancel): nothing to try again
	}
	if err := a.retryPush(ctx, rp, wait); err != nil {
		activity.GetLogger(ctx).Warn("start the run of a failed push's next try (tried again in its batch)", "batch", p.Batch, "run", to, "error", err)
		return false
	}
	return true
}

// taskPush is the push of t's current attempt, as MarkBatchPushed left it.
func (a *Tasks) taskPush(t courier.Task) api.TaskPush {
	p := api.TaskPush{TaskID: t.TaskID, TaskVersion: t.Version, Attempt: t.Attempt, Priority: t.Priority, Queue: t.Queue,
		ConcurrencyKey: t.ConcurrencyKey, Payload: t.Payload, HeartbeatTimeout: api.PositiveDuration(t.AttemptHeartbeatTimeout),
		ResultURL: a.reportURL(t.TaskID, t.Version, "result"), HeartbeatURL: a.reportURL(t.TaskID, t.Version, "heartbeat"),
		DeliveryID: courier.TaskAttemptDeliveryID(t.TaskID, t.Version, t.Attempt), ResultsURL: a.resultsURL()}
	if t.DeadlineAt != nil {
		p.Deadline = t.DeadlineAt.UTC()
	}
	return p
}

func (a *Tasks) resultsURL() string { return a.publicURL + "/v1/tasks/results" }

// chunkDeliveryID is a batched push's webhook-id, derived from the delivery ids of the
// attempts its group was formed of (chunksOf), so a repeat of the request after a crash is
// recognised as one even when some of them have left it.
func chunkDeliveryID(deliveryIDs []string) string {
	h := sha256.New()
	for _, id := range deliveryIDs {
		h.Write([]byte(id))
		h.Write([]byte{0})
	}
	return "task-batch/" + hex.EncodeToString(h.Sum(nil)[:16])
}

// startPushSpans starts a span of each attempt's push in its task's trace (the trace its insert
// began), so a task's trace runs from the insert through its push to its result whichever mode
// pushed it. spans[i] is tasks[i]'s, nil for a task inserted without a trace.
func startPushSpans(ctx context.Context, tasks []courier.Task, batch string) []trace.Span {
	spans := make([]trace.Span, len(tasks))
	for i, t := range tasks {
		if t.Trace.IsZero() {
			continue
		}
		tctx := tracing.ContextWith(context.WithoutCancel(ctx), t.Trace)
		_, span := tracing.Start(tctx, "task push", trace.SpanKindClient,
			attribute.String("courier.task_id", t.TaskID), attribute.Int64("courier.task_version", t.Version),
			attribute.Int("courier.attempt", t.Attempt), attribute.String("courier.batch", batch))
		spans[i] = span
	}
	return spans
}
