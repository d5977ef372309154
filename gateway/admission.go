package gateway

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/internal/ratelimit"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/timers"
)

// limitTTL is how long a gateway trusts a business type's or queue's insert rate it has read:
// a change made through another gateway applies here within it (through this one, at once).
const limitTTL = 2 * time.Second

// admission is the gateway's admission control (docs/admission.md): token buckets for each API
// key's requests, each business type's timer creates and each queue's task inserts, answered
// 429 rate_limited with Retry-After, and the count of every refusal (the queue's backlog budget
// is the store's, in the insert's transaction; its refusals are counted here). The buckets live
// in this process: each gateway instance admits up to the configured rate, so N instances
// admit up to N times it in all.
type admission struct {
	keyRate courier.Rate // for keys without their own rate
	buckets *ratelimit.Buckets
	limits  *limitCache
	metrics *metrics.Admission
}

func newAdmission(keyRate courier.Rate, now func() time.Time, m *metrics.Admission) *admission {
	if now == nil {
		now = time.Now
	}
	return &admission{keyRate: keyRate, buckets: ratelimit.New(now, 0),
		limits: &limitCache{now: now, ttl: limitTTL, m: map[string]cachedRate{}}, metrics: m}
}

// take takes one token for name's limit of the given kind, or returns rate_limited with the
// wait until the next token as Retry-After.
func (a *admission) take(reason, kind, name string, r courier.Rate) error {
	if r.Unlimited() {
		return nil
	}
	burst := r.EffectiveBurst()
	ok, wait := a.buckets.Take(reason+"/"+name, r.PerSecond, burst)
	if ok {
		return nil
	}
	a.metrics.Refuse(reason, name)
	return &courier.Error{
		Code: courier.CodeRateLimited,
		Message: fmt.Sprintf("%s %s is over its rate of %g per second (burst %d); retry after %s",
			kind, name, r.PerSecond, burst, wait.Round(time.Millisecond)),
		Details:    map[string]any{"limit": kind, "name": name, "rate_per_second": r.PerSecond, "burst": burst},
		RetryAfter: wait,
	}
}

// admitKey counts one request of an authenticated key against its own rate or the default.
func (a *admission) admitKey(k apikey.Key) error {
	r := a.keyRate
	if k.Rate != nil {
		r = *k.Rate
	}
	return a.take(metrics.RefusedKeyRate, "api_key", k.ID, r)
}

// admitInsert counts one insert against the rate of the business type or queue it names. A
// name that breaks the name rule or is not configured is admitted: the service refuses it with
// the right error right after.
func (a *admission) admitInsert(ctx context.Context, reason, kind, name string, load func(context.Context, string) (courier.Rate, error)) error {
	if !courier.ValidName(name) {
		return nil
	}
	r, ok := a.limits.get(ctx, kind+"/"+name, func(ctx context.Context) (courier.Rate, error) { return load(ctx, name) })
	if !ok {
		return nil
	}
	return a.take(reason, kind, name, r)
}

// refused counts a backlog refusal returned by the store.
func (a *admission) refused(err error, queue string) {
	if courier.ErrorCode(err) == courier.CodeBacklogFull {
		a.metrics.Refuse(metrics.RefusedBacklog, queue)
	}
}

// limitCache remembers business types' and queues' insert rates for limitTTL, so a busy
// producer does not cost one more database read per request. Only names that exist are kept,
// so it is bounded by the configured types and queues.
type limitCache struct {
	mu  sync.Mutex
	now func() time.Time
	ttl time.Duration
	m   map[string]cachedRate
}

type cachedRate struct {
	rate courier.Rate
	at   time.Time
}

// get returns key's rate, loading it when absent or stale; ok is false when it cannot be read
// (not configured, or the database is down: the request goes on and meets that error).
func (c *limitCache) get(ctx context.Context, key string, load func(context.Context) (courier.Rate, error)) (courier.Rate, bool) {
	c.mu.Lock()
	e, found := c.m[key]
	c.mu.Unlock()
	if found && c.now().Sub(e.at) < c.ttl {
		return e.rate, true
	}
	r, err := load(ctx)
	if err != nil {
		c.forget(key)
		return courier.Rate{}, false
	}
	c.mu.Lock()
	c.m[key] = cachedRate{rate: r, at: c.now()}
	c.mu.Unlock()
	return r, true
}

func (c *limitCache) forget(key string) {
	c.mu.Lock()
	delete(c.m, key)
	c.mu.Unlock()
}

// admittedTasks applies the queue's insert rate before an insert and counts backlog refusals;
// a queue changed through this gateway takes its new rate at once.
type admittedTasks struct {
	TaskService
	a *admission
}

func (t admittedTasks) Insert(ctx context.Context, r courier.TaskRequest) (courier.Task, courier.TaskInsertOutcome, error) {
	queue := r.Queue
	if queue == "" {
		queue = courier.DefaultQueueName
	}
	err := t.a.admitInsert(ctx, metrics.RefusedQueueRate, "queue", queue, func(ctx context.Context, name string) (courier.Rate, error) {
		q, err := t.TaskService.GetQueue(ctx, name)
		return q.InsertLimit(), err
	})
	if err != nil {
		return courier.Task{}, "", err
	}
	task, outcome, err := t.TaskService.Insert(ctx, r)
	t.a.refused(err, queue)
	return task, outcome, err
}

func (t admittedTasks) PutQueue(ctx context.Context, q courier.Queue) (courier.Queue, bool, error) {
	defer t.a.limits.forget("queue/" + q.Name)
	return t.TaskService.PutQueue(ctx, q)
}

// admittedTimers applies the business type's insert rate before a timer is created.
type admittedTimers struct {
	TimerService
	a     *admission
	types BizTypeStore
}

func (t admittedTimers) Create(ctx context.Context, r api.TimerRequest) (api.Timer, bool, error) {
	if err := t.admit(ctx, r.BizType); err != nil {
		return api.Timer{}, false, err
	}
	return t.TimerService.Create(ctx, r)
}

// admit counts one timer create against its business type's insert rate.
func (t admittedTimers) admit(ctx context.Context, bizType string) error {
	return t.a.admitInsert(ctx, metrics.RefusedBizTypeRate, "biz_type", bizType, func(ctx context.Context, name string) (courier.Rate, error) {
		b, err := t.types.GetBizType(ctx, name)
		return b.InsertLimit(), err
	})
}

// CreateBatch applies the insert rate to each timer of a batch: a timer over its type's rate is
// refused (rate_limited) on its own, the others go on.
func (t admittedTimers) CreateBatch(ctx context.Context, reqs []api.TimerRequest) ([]timers.BatchResult, error) {
	refused := make([]error, len(reqs))
	var pass []api.TimerRequest
	var at []int
	for i, r := range reqs {
		if refused[i] = t.admit(ctx, r.BizType); refused[i] == nil {
			pass, at = append(pass, r), append(at, i)
		}
	}
	res, err := t.TimerService.CreateBatch(ctx, pass)
	if err != nil {
		return nil, err
	}
	out := make([]timers.BatchResult, len(reqs))
	for i, e := range refused {
		out[i].Err = e
	}
	for j, r := range res {
		out[at[j]] = r
	}
	return out, nil
}

// admittedBizTypes forgets a business type's cached rate when it changes through this gateway.
type admittedBizTypes struct {
	BizTypeStore
	a *admission
}

func (b admittedBizTypes) PutBizType(ctx context.Context, t courier.BizType) (courier.BizType, bool, error) {
	defer b.a.limits.forget("biz_type/" + t.Name)
	return b.BizTypeStore.PutBizType(ctx, t)
}

func (b admittedBizTypes) DeleteBizType(ctx context.Context, name string) error {
	defer b.a.limits.forget("biz_type/" + name)
	return b.BizTypeStore.DeleteBizType(ctx, name)
}

// wrap puts admission control in front of the services that insert.
func (a *admission) wrap(d Deps) Deps {
	if d.Tasks != nil {
		d.Tasks = admittedTasks{TaskService: d.Tasks, a: a}
	}
	if d.Timers != nil && d.BizTypes != nil {
		d.Timers = admittedTimers{TimerService: d.Timers, a: a, types: d.BizTypes}
	}
	if d.BizTypes != nil {
		d.BizTypes = admittedBizTypes{BizTypeStore: d.BizTypes, a: a}
	}
	return d
}
