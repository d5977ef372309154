package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	cc "github.com/courier-oss/courier/client"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/tasks"
	"github.com/courier-oss/courier/worker"
)

// clientStack is the whole gateway (outbox, business types, timers, schedules, tasks, queues)
// on a real worker, store and Temporal, for the Go client to call.
type clientStack struct {
	*stack
	url                      string
	admin, producer, wkey    string
	pushes                   chan api.TaskPush // every push to pushURL, answered 202
	pushURL                  string
	rcv                      *receiver // timer and schedule callbacks of business type "orders"
	secret, rcvURL           string
	adminC, producerC, workC *cc.Client
}

func newClientStack(t *testing.T) *clientStack {
	t.Helper()
	s := newStack(t, "sqlite")
	s.createStream("ORDERS", "orders.>")
	rcv, secret := s.callbacks()
	ctx := t.Context()

	// The gateway's address goes into every push, so it listens before the worker starts.
	var h http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { h.ServeHTTP(rw, r) }))
	t.Cleanup(srv.Close)
	w, err := worker.New(worker.Config{
		Relay:                  relay.Config{PollInterval: 50 * time.Millisecond, Retry: testRetry},
		Namespace:              s.ts.GetDefaultNamespace(),
		AllowLoopbackCallbacks: true,
		BizTypeRefresh:         100 * time.Millisecond,
		ShutdownTimeout:        2 * time.Second,
		Tasks: tasks.Config{
			PollInterval: 200 * time.Millisecond,
			RecoverAfter: 5 * time.Second,
			PublicURL:    srv.URL,
			SweepEvery:   time.Hour,
		},
	}, worker.Deps{Temporal: s.tc, Publisher: s.pub, Logger: quiet, BizTypes: s.store, TimerRows: s.store, Tasks: s.store,
		Sources: []relay.Source{{Name: courier.DefaultSource, Store: s.store}}})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)
	svc := s.timerService()
	h = gateway.New(gateway.Config{}, gateway.Deps{
		Keys: s.store, Outbox: s.store, Runs: relay.DeliveryRuns{Temporal: s.tc, Wait: 2 * time.Second},
		BizTypes: s.store, Timers: svc, Schedules: svc, Secrets: s.store, Wake: w.Relay().Wake,
		Tasks:  tasks.NewService(s.store, s.tc, s.ts.GetDefaultNamespace(), w.WakeTasks, nil, quiet),
		Logger: quiet,
	})

	cs := &clientStack{stack: s, url: srv.URL, rcv: rcv, secret: secret, rcvURL: s.rcvURL,
		pushes: make(chan api.TaskPush, 16)}
	for _, k := range []struct {
		dst   *string
		scope apikey.Scope
	}{{&cs.admin, apikey.ScopeAdmin}, {&cs.producer, apikey.ScopeProducer}, {&cs.wkey, apikey.ScopeWorker}} {
		_, token, err := s.store.CreateAPIKey(ctx, "client-"+string(k.scope), []apikey.Scope{k.scope})
		require.NoError(t, err)
		*k.dst = token
	}
	cs.adminC, cs.producerC, cs.workC = cs.client(cs.admin), cs.client(cs.producer), cs.client(cs.wkey)
	cs.pushURL = startHTTP(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var p api.TaskPush
		_ = json.NewDecoder(r.Body).Decode(&p)
		select {
		case cs.pushes <- p:
		default:
		}
		rw.WriteHeader(http.StatusAccepted)
	}))
	return cs
}

func (cs *clientStack) client(key string, opts ...cc.Option) *cc.Client {
	c, err := cc.New(cs.url, append([]cc.Option{cc.WithAPIKey(key)}, opts...)...)
	require.NoError(cs.t, err)
	return c
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 30*time.Second, 50*time.Millisecond, what)
}

// Every call of the client against the real gateway: outbox, business types, timers,
// schedules, queues and tasks, with the answers each promises.
func TestClientEveryCall(t *testing.T) {
	cs := newClientStack(t)
	ctx := t.Context()
	admin, producer, wk := cs.adminC, cs.producerC, cs.workC

	t.Run("outbox", func(t *testing.T) {
		rec, err := producer.Publish(ctx, cc.PublishRequest{Topic: "orders.created", Key: "o-1",
			Payload: json.RawMessage(`{"order":1}`), Headers: map[string]string{"X-Trace": "abc"}})
		require.NoError(t, err)
		require.Equal(t, courier.OutboxPending, rec.Status)
		require.Equal(t, courier.DefaultSource, rec.Source)
		waitFor(t, "the record is sent", func() bool {
			got, err := producer.GetOutbox(ctx, "", rec.ID)
			return err == nil && got.Status == courier.OutboxSent
		})

		// No stream captures nostream.*: the record ends dead; a redrive after the stream
		// exists sends it.
		dead, err := producer.Publish(ctx, cc.PublishRequest{Topic: "nostream.created", Payload: json.RawMessage(`"lost"`)})
		require.NoError(t, err)
		waitFor(t, "the record is dead", func() bool {
			got, err := producer.GetOutbox(ctx, courier.DefaultSource, dead.ID)
			return err == nil && got.Status == courier.OutboxDead
		})
		page, err := producer.ListOutbox(ctx, cc.OutboxQuery{Status: courier.OutboxDead, IncludePayload: true})
		require.NoError(t, err)
		require.Len(t, page.Items, 1)
		require.Equal(t, dead.ID, page.Items[0].ID)
		require.JSONEq(t, `"lost"`, string(page.Items[0].Payload), "the payload as posted, not base64")
		require.Equal(t, "json", page.Items[0].PayloadEncoding)
		data, err := page.Items[0].PayloadData()
		require.NoError(t, err)
		require.Equal(t, []byte(`"lost"`), data)
		require.NotEmpty(t, page.Items[0].LastError)
		page, err = producer.ListOutbox(ctx, cc.OutboxQuery{Status: courier.OutboxDead})
		require.NoError(t, err)
		require.Nil(t, page.Items[0].Payload, "no payloads unless asked")
		require.Equal(t, 6, page.Items[0].PayloadBytes)

		_, err = producer.RedriveOutbox(ctx, "", dead.ID)
		require.ErrorIs(t, err, cc.ErrPermissionDenied, "redrive is for admins")
		cs.createStream("NOSTREAM", "nostream.>")
		var redriven *cc.OutboxRecord
		waitFor(t, "the redrive is taken", func() bool {
			redriven, err = admin.RedriveOutbox(ctx, "", dead.ID)
			var ae *cc.Error
			if errors.As(err, &ae) && ae.Code == courier.CodeConflict && ae.RetryAfter > 0 {
				return false // the dead run is still closing
			}
			require.NoError(t, err)
			return true
		})
		require.Equal(t, courier.OutboxPending, redriven.Status)
		waitFor(t, "the redriven record is sent", func() bool {
			got, err := producer.GetOutbox(ctx, "", dead.ID)
			return err == nil && got.Status == courier.OutboxSent
		})
		_, err = admin.RedriveOutbox(ctx, "", rec.ID)
		require.ErrorIs(t, err, cc.ErrConflict, "only dead records are redriven")

		// Bulk: a record dead on a topic without a stream is redriven by pattern.
		gone, err := producer.Publish(ctx, cc.PublishRequest{Topic: "gone.a", Payload: json.RawMessage(`1`)})
		require.NoError(t, err)
		waitFor(t, "the gone.a record is dead", func() bool {
			got, err := producer.GetOutbox(ctx, "", gone.ID)
			return err == nil && got.Status == courier.OutboxDead
		})
		_, err = producer.RedriveDead(ctx, cc.RedriveFilter{Topic: "gone.*"})
		require.ErrorIs(t, err, cc.ErrPermissionDenied)
		waitFor(t, "the bulk redrive takes the record", func() bool {
			res, err := admin.RedriveDead(ctx, cc.RedriveFilter{Topic: "gone.*", Max: new(10)})
			require.NoError(t, err)
			require.False(t, res.More)
			return res.Done == 1
		})

		// Pages: one record per page, then every record through the iterator.
		for i := 0; i < 3; i++ {
			_, err := producer.Publish(ctx, cc.PublishRequest{Topic: "orders.paged", Payload: json.RawMessage(`1`)})
			require.NoError(t, err)
		}
		first, err := producer.ListOutbox(ctx, cc.OutboxQuery{Topic: "orders.paged", Limit: 1})
		require.NoError(t, err)
		require.Len(t, first.Items, 1)
		require.NotEmpty(t, first.NextPageToken)
		second, err := producer.ListOutbox(ctx, cc.OutboxQuery{Topic: "orders.paged", Limit: 1, PageToken: first.NextPageToken})
		require.NoError(t, err)
		require.Greater(t, second.Items[0].ID, first.Items[0].ID)
		var ids []int64
		for r, err := range producer.AllOutbox(ctx, cc.OutboxQuery{Topic: "orders.paged", Limit: 2}) {
			require.NoError(t, err)
			ids = append(ids, r.ID)
		}
		require.Len(t, ids, 3)
		require.True(t, sort.SliceIsSorted(ids, func(i, j int) bool { return ids[i] < ids[j] }))
		_, err = producer.ListOutbox(ctx, cc.OutboxQuery{Topic: "orders.created", PageToken: first.NextPageToken})
		requireField(t, err, cc.ErrInvalid, "page_token")
		_, err = producer.GetOutbox(ctx, "", 999999)
		require.ErrorIs(t, err, cc.ErrNotFound)
		_, err = producer.GetOutbox(ctx, "elsewhere", rec.ID)
		require.ErrorIs(t, err, cc.ErrNotFound, "an unknown source")
	})

	t.Run("business types", func(t *testing.T) {
		bt, err := admin.PutBizType(ctx, "orders", cc.BizTypeConfig{Delivery: courier.DeliveryHTTP, CallbackURL: cs.rcvURL,
			Secrets: []string{cs.secret}, RequestTimeout: cc.PositiveDuration(5 * time.Second),
			Retry: cc.Retry{InitialInterval: cc.PositiveDuration(time.Second), MaxAttempts: 3}})
		require.NoError(t, err)
		require.True(t, bt.Created)
		require.Equal(t, 1, bt.SecretsCount)
		require.Empty(t, bt.GeneratedSecret)
		require.Equal(t, cc.Duration(5*time.Second), bt.RequestTimeout)
		require.Equal(t, 3, bt.Retry.MaxAttempts)

		tmp, err := admin.PutBizType(ctx, "tmp", cc.BizTypeConfig{Delivery: courier.DeliveryHTTP, CallbackURL: "https://example.com/cb"})
		require.NoError(t, err)
		require.NotEmpty(t, tmp.GeneratedSecret, "an http type without secrets gets one, shown once")
		again, err := admin.PutBizType(ctx, "tmp", cc.BizTypeConfig{Delivery: courier.DeliveryMQ, Topic: "orders.tmp"})
		require.NoError(t, err)
		require.False(t, again.Created)
		got, err := admin.GetBizType(ctx, "tmp")
		require.NoError(t, err)
		require.Equal(t, "orders.tmp", got.Topic)
		all, err := admin.ListBizTypes(ctx)
		require.NoError(t, err)
		require.Len(t, all, 2)
		require.NoError(t, admin.DeleteBizType(ctx, "tmp"))
		_, err = admin.GetBizType(ctx, "tmp")
		require.ErrorIs(t, err, cc.ErrNotFound)
		_, err = admin.PutBizType(ctx, "bad", cc.BizTypeConfig{Delivery: courier.DeliveryMQ, Topic: "$JS.API.STREAM.PURGE.ORDERS"})
		requireField(t, err, cc.ErrInvalid, "topic")
		_, err = producer.GetBizType(ctx, "orders")
		require.ErrorIs(t, err, cc.ErrPermissionDenied)
	})

	t.Run("timers", func(t *testing.T) {
		id := "заказ:1" // escaped in the path, decoded once by the gateway
		req := cc.TimerRequest{BizType: "orders", BizID: id, When: cc.After(time.Hour), Payload: json.RawMessage(`{"order":1}`)}
		tm, err := producer.CreateTimer(ctx, req)
		require.NoError(t, err)
		require.True(t, tm.Created)
		require.Equal(t, courier.TimerScheduled, tm.State)
		require.Equal(t, id, tm.BizID)
		again, err := producer.CreateTimer(ctx, req)
		require.NoError(t, err)
		require.False(t, again.Created, "the same request again is the same timer")
		require.Equal(t, tm.FireAt, again.FireAt)
		req.Payload = json.RawMessage(`{"order":2}`)
		_, err = producer.CreateTimer(ctx, req)
		require.ErrorIs(t, err, cc.ErrConflict)

		at := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
		moved, err := producer.RescheduleTimer(ctx, "orders", id, cc.Reschedule{When: cc.At(at)})
		require.NoError(t, err)
		require.True(t, moved.FireAt.Equal(at), "%s != %s", moved.FireAt, at)
		got, err := producer.GetTimer(ctx, "orders", id)
		require.NoError(t, err)
		require.True(t, got.FireAt.Equal(at))

		_, err = producer.CreateTimer(ctx, cc.TimerRequest{BizType: "orders", BizID: "o-2", When: cc.After(time.Hour)})
		require.NoError(t, err)
		waitFor(t, "both timers are listed", func() bool {
			page, err := producer.ListTimers(ctx, cc.TimerQuery{BizType: "orders", State: courier.TimerScheduled})
			return err == nil && len(page.Items) == 2
		})
		page, err := producer.ListTimers(ctx, cc.TimerQuery{BizType: "orders", Limit: 1})
		require.NoError(t, err)
		require.Len(t, page.Items, 1)
		require.NotEmpty(t, page.NextPageToken)
		seen := map[string]bool{}
		for tm, err := range producer.AllTimers(ctx, cc.TimerQuery{BizType: "orders", Limit: 1}) {
			require.NoError(t, err)
			seen[tm.BizID] = true
		}
		require.Equal(t, map[string]bool{id: true, "o-2": true}, seen)
		_, err = producer.ListTimers(ctx, cc.TimerQuery{BizType: "other", PageToken: page.NextPageToken})
		requireField(t, err, cc.ErrInvalid, "")

		cancelled, err := producer.CancelTimer(ctx, "orders", id)
		require.NoError(t, err)
		require.Equal(t, courier.TimerCancelled, cancelled.State)

		// A zero delay fires at once: the callback arrives and the timer says delivered.
		_, err = producer.CreateTimer(ctx, cc.TimerRequest{BizType: "orders", BizID: "now-1", When: cc.After(0)})
		require.NoError(t, err)
		waitFor(t, "the timer is delivered", func() bool {
			got, err := producer.GetTimer(ctx, "orders", "now-1")
			return err == nil && got.State == courier.TimerDelivered && cs.rcv.count("now-1") == 1
		})
		_, err = producer.RescheduleTimer(ctx, "orders", "now-1", cc.Reschedule{When: cc.After(time.Hour)})
		require.ErrorIs(t, err, cc.ErrConflict, "a delivered timer cannot move")

		_, err = producer.GetTimer(ctx, "orders", "nope")
		require.ErrorIs(t, err, cc.ErrNotFound)
		_, err = producer.CreateTimer(ctx, cc.TimerRequest{BizType: "orders", BizID: "a/b", When: cc.After(time.Hour)})
		requireField(t, err, cc.ErrInvalid, "biz_id")
		_, err = producer.CreateTimer(ctx, cc.TimerRequest{BizType: "unknown", BizID: "x", When: cc.After(time.Hour)})
		requireField(t, err, cc.ErrValidation, "biz_type")
	})

	t.Run("schedules", func(t *testing.T) {
		sc, err := producer.CreateSchedule(ctx, "nightly", cc.ScheduleSpec{BizType: "orders", Cron: "0 2 * * *", TimeZone: "Europe/Paris",
			Payload: json.RawMessage(`{"job":"nightly"}`)})
		require.NoError(t, err)
		require.Equal(t, "nightly", sc.ID)
		require.Equal(t, "0 2 * * *", sc.Spec.Cron)
		require.NotEmpty(t, sc.NextRuns)
		_, err = producer.CreateSchedule(ctx, "nightly", cc.ScheduleSpec{BizType: "orders", Cron: "0 2 * * *"})
		require.ErrorIs(t, err, cc.ErrConflict)

		sc, err = producer.PutSchedule(ctx, "nightly", cc.ScheduleSpec{BizType: "orders", Interval: cc.PositiveDuration(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, cc.PositiveDuration(time.Hour), sc.Spec.Interval)
		sc, err = producer.PauseSchedule(ctx, "nightly", "maintenance")
		require.NoError(t, err)
		require.True(t, sc.Paused)
		require.Equal(t, "maintenance", sc.Note)
		sc, err = producer.UnpauseSchedule(ctx, "nightly", "")
		require.NoError(t, err)
		require.False(t, sc.Paused)
		_, err = producer.TriggerSchedule(ctx, "nightly")
		require.NoError(t, err)
		waitFor(t, "the triggered run is counted", func() bool {
			sc, err := producer.GetSchedule(ctx, "nightly")
			return err == nil && sc.Runs >= 1
		})
		require.NoError(t, producer.DeleteSchedule(ctx, "nightly"))
		_, err = producer.GetSchedule(ctx, "nightly")
		require.ErrorIs(t, err, cc.ErrNotFound)
	})

	t.Run("queues and tasks", func(t *testing.T) {
		q, err := admin.PutQueue(ctx, "cq", cc.QueueConfig{PushURL: cs.pushURL, ConcurrencyLimit: 2,
			ProcessingTimeout: cc.PositiveDuration(time.Minute), HeartbeatTimeout: cc.Duration(30 * time.Second),
			Retry: cc.Retry{InitialInterval: cc.PositiveDuration(time.Second), MaxAttempts: 2}})
		require.NoError(t, err)
		require.True(t, q.Created)
		require.Equal(t, cc.Duration(time.Minute), q.ProcessingTimeout)
		require.Equal(t, cc.Duration(30*time.Second), q.HeartbeatTimeout)
		require.Equal(t, cc.Duration(24*time.Hour), q.PendingTimeout, "a default")
		got, err := admin.GetQueue(ctx, "cq")
		require.NoError(t, err)
		require.Equal(t, cs.pushURL, got.PushURL)
		qs, err := admin.ListQueues(ctx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(qs), 2, "default and cq")
		_, err = admin.PutQueue(ctx, "cq2", cc.QueueConfig{ConcurrencyLimit: 100000})
		requireField(t, err, cc.ErrValidation, "concurrency_limit")
		// Flow control: per-key limit, weights and the dispatch rate.
		fq, err := admin.PutQueue(ctx, "cq3", cc.QueueConfig{ConcurrencyLimit: 10, PerKeyLimit: 6, KeyWeights: map[string]int{"tenant-1": 2},
			DispatchRate: 2.5})
		require.NoError(t, err)
		require.Equal(t, 6, fq.PerKeyLimit)
		require.True(t, fq.FairKeys, "implied by the per-key limit")
		require.Equal(t, map[string]int{"tenant-1": 2}, fq.KeyWeights)
		require.InDelta(t, 2.5, fq.DispatchRate, 0)
		require.Equal(t, 3, fq.DispatchBurst, "the rate rounded up")
		_, err = admin.PutQueue(ctx, "cq3", cc.QueueConfig{ConcurrencyLimit: 10, PerKeyLimit: 11})
		requireField(t, err, cc.ErrValidation, "per_key_limit")

		req := cc.TaskRequest{TaskID: "doc/x", TaskVersion: 1}
		_, err = producer.InsertTask(ctx, req)
		requireField(t, err, cc.ErrInvalid, "task_id")

		req = cc.TaskRequest{TaskID: "doc 1", TaskVersion: 1, Priority: 2, Queue: "cq", Payload: json.RawMessage(`{"file":"a.pdf"}`),
			Overrides: cc.TaskOverrides{MaxAttempts: 1}, ConcurrencyKey: "tenant-1"}
		task, err := producer.InsertTask(ctx, req)
		require.NoError(t, err)
		require.Equal(t, courier.TaskCreated, task.Outcome)
		require.Equal(t, "tenant-1", task.ConcurrencyKey)
		require.Equal(t, 1, task.Overrides.MaxAttempts)
		var p api.TaskPush
		select {
		case p = <-cs.pushes:
		case <-time.After(30 * time.Second):
			t.Fatal("no push")
		}
		require.Equal(t, "doc 1", p.TaskID)
		require.Equal(t, "tenant-1", p.ConcurrencyKey, "the push names the key")
		again, err := producer.InsertTask(ctx, req)
		require.NoError(t, err)
		require.Equal(t, courier.TaskExisting, again.Outcome, "the same version again returns it")

		_, err = producer.Heartbeat(ctx, "doc 1", 1, p.Attempt, nil)
		require.ErrorIs(t, err, cc.ErrPermissionDenied, "reports need the worker scope")
		var acc *cc.ReportAccepted
		waitFor(t, "the heartbeat is accepted", func() bool {
			acc, err = wk.Heartbeat(ctx, "doc 1", 1, p.Attempt, json.RawMessage(`{"page":1}`))
			return err == nil
		})
		require.True(t, acc.Accepted)
		_, err = wk.Heartbeat(ctx, "doc 1", 1, p.Attempt+1, nil)
		require.ErrorIs(t, err, cc.ErrConflict, "another attempt")
		acc, err = wk.ReportResult(ctx, "doc 1", 1, api.TaskResult{Attempt: p.Attempt, Status: courier.OutcomeSuccess,
			StatusCode: 200, Message: "1 page", Result: json.RawMessage(`{"pages":1}`)})
		require.NoError(t, err)
		require.True(t, acc.Accepted)
		waitFor(t, "the task succeeds", func() bool {
			got, err := producer.GetTask(ctx, "doc 1")
			return err == nil && got.Status == courier.TaskSuccess
		})
		got1, err := producer.GetTaskVersion(ctx, "doc 1", 1)
		require.NoError(t, err)
		require.JSONEq(t, `{"pages":1}`, string(got1.Result))
		require.Equal(t, "1 page", got1.Message)
		_, err = wk.ReportResult(ctx, "doc 1", 1, api.TaskResult{Attempt: p.Attempt, Status: courier.OutcomeSuccess})
		require.ErrorIs(t, err, cc.ErrConflict, "the attempt has its outcome")
		_, err = producer.CancelTask(ctx, "doc 1", 1)
		require.ErrorIs(t, err, cc.ErrConflict, "a finished task cannot be cancelled")

		// Versions: a newer one is created, an older one is refused naming the current one.
		_, err = producer.InsertTask(ctx, cc.TaskRequest{TaskID: "doc 2", TaskVersion: 5})
		require.NoError(t, err)
		_, err = producer.InsertTask(ctx, cc.TaskRequest{TaskID: "doc 2", TaskVersion: 4})
		var ae *cc.Error
		require.ErrorAs(t, err, &ae)
		require.Equal(t, http.StatusConflict, ae.StatusCode)
		require.EqualValues(t, 5, ae.Details["current_version"])
		// The default queue has no push_url: the task waits, and is cancelled at once.
		cancelled, err := producer.CancelTask(ctx, "doc 2", 5)
		require.NoError(t, err)
		require.Equal(t, courier.TaskCancelled, cancelled.Status)
		cancelled, err = producer.CancelTask(ctx, "doc 2", 5)
		require.NoError(t, err, "cancelling a cancelled task returns it")
		require.Equal(t, courier.TaskCancelled, cancelled.Status)
		_, err = producer.GetTaskVersion(ctx, "doc 2", 9)
		require.ErrorIs(t, err, cc.ErrNotFound)
		require.ErrorIs(t, err, &courier.Error{Code: courier.CodeNotFound})

		// The list finds them again, newest first, page by page.
		page, err := producer.ListTasks(ctx, cc.TaskQuery{Status: courier.TaskCancelled})
		require.NoError(t, err)
		require.Len(t, page.Items, 1)
		require.Equal(t, "doc 2", page.Items[0].TaskID)
		var all []string
		for tk, err := range producer.AllTasks(ctx, cc.TaskQuery{Limit: 1}) {
			require.NoError(t, err)
			require.Nil(t, tk.Payload, "lists leave payloads out")
			all = append(all, fmt.Sprintf("%s/%d", tk.TaskID, tk.TaskVersion))
		}
		require.Equal(t, []string{"doc 2/5", "doc 1/1"}, all)
		_, err = producer.ListTasks(ctx, cc.TaskQuery{Queue: "tw", Priority: 9})
		require.ErrorIs(t, err, cc.ErrInvalid)

		// Bulk actions (scope admin): the cancelled doc 2 comes back pending in the default
		// queue (it has no push_url) and is cancelled again; doc 1 succeeded and is never matched.
		_, err = producer.RetryTasks(ctx, cc.TaskBulkFilter{})
		require.ErrorIs(t, err, cc.ErrPermissionDenied)
		retried, err := admin.RetryTasks(ctx, cc.TaskBulkFilter{Queue: courier.DefaultQueueName, Max: new(10)})
		require.NoError(t, err)
		require.Equal(t, api.NewTaskRetryResult(1, 0, false), *retried)
		again2, err := producer.GetTaskVersion(ctx, "doc 2", 5)
		require.NoError(t, err)
		require.Equal(t, courier.TaskPending, again2.Status)
		bulkCancelled, err := admin.CancelTasks(ctx, cc.TaskBulkFilter{Queue: courier.DefaultQueueName, Status: courier.TaskPending})
		require.NoError(t, err)
		require.Equal(t, api.NewTaskCancelResult(1, 0, false), *bulkCancelled)
		one, err := producer.RetryTask(ctx, "doc 2", 5)
		require.NoError(t, err, "one version is retried alone too")
		require.Equal(t, courier.TaskPending, one.Status)
		_, err = producer.RetryTask(ctx, "doc 2", 5)
		require.ErrorIs(t, err, cc.ErrConflict, "a pending task cannot be retried")
		_, err = producer.CancelTask(ctx, "doc 2", 5)
		require.NoError(t, err)
		_, err = admin.CancelTasks(ctx, cc.TaskBulkFilter{Status: courier.TaskSuccess})
		requireField(t, err, cc.ErrValidation, "status")
	})

	t.Run("authentication", func(t *testing.T) {
		_, err := cs.client("ck_nope").GetTask(ctx, "doc 1")
		require.ErrorIs(t, err, cc.ErrUnauthenticated)
		var ae *cc.Error
		require.ErrorAs(t, err, &ae)
		require.Equal(t, http.StatusUnauthorized, ae.StatusCode)
	})
}

// The queue settings of the batched dispatch mode through the client (put, get, list, and the
// 422s naming the field), and ReportResults: many results in one call, each answered on its
// own and read by ResultError as ReportResult would have returned it.
func TestClientBatchedQueueAndResults(t *testing.T) {
	cs := newClientStack(t)
	ctx := t.Context()
	admin, producer, wk := cs.adminC, cs.producerC, cs.workC
	batches := make(chan api.TaskPushBatch, 8)
	pushURL := startHTTP(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var b api.TaskPushBatch
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil || len(b.Tasks) == 0 {
			http.Error(rw, "not a batched push", http.StatusBadRequest)
			return
		}
		batches <- b
		rw.WriteHeader(http.StatusAccepted)
	}))

	def, err := admin.GetQueue(ctx, courier.DefaultQueueName)
	require.NoError(t, err)
	require.Equal(t, courier.DispatchPerAttempt, def.DispatchMode, "the default mode")
	require.Equal(t, 1, def.PushBatchSize)
	_, err = admin.PutQueue(ctx, "cb", cc.QueueConfig{PushBatchSize: 3})
	requireField(t, err, cc.ErrValidation, "push_batch_size")
	_, err = admin.PutQueue(ctx, "cb", cc.QueueConfig{DispatchMode: "sideways"})
	requireField(t, err, cc.ErrValidation, "dispatch_mode")
	_, err = admin.GetQueue(ctx, "cb")
	require.ErrorIs(t, err, cc.ErrNotFound, "a refused PUT writes nothing")

	cfg := cc.QueueConfig{ConcurrencyLimit: 10, DispatchMode: courier.DispatchBatched, PushBatchSize: 3, Retry: cc.Retry{MaxAttempts: 1}}
	q, err := admin.PutQueue(ctx, "cb", cfg)
	require.NoError(t, err)
	require.True(t, q.Created)
	require.Equal(t, courier.DispatchBatched, q.DispatchMode)
	require.Equal(t, 3, q.PushBatchSize)
	for i := range 3 {
		_, err := producer.InsertTask(ctx, cc.TaskRequest{TaskID: fmt.Sprintf("cb-%d", i), TaskVersion: 1, Queue: "cb",
			Payload: json.RawMessage(`{"n":` + fmt.Sprint(i) + `}`)})
		require.NoError(t, err)
	}
	cfg.PushURL = pushURL
	q, err = admin.PutQueue(ctx, "cb", cfg)
	require.NoError(t, err)
	require.False(t, q.Created)
	got, err := admin.GetQueue(ctx, "cb")
	require.NoError(t, err)
	require.Equal(t, courier.DispatchBatched, got.DispatchMode)
	require.Equal(t, 3, got.PushBatchSize)
	require.Equal(t, pushURL, got.PushURL)
	qs, err := admin.ListQueues(ctx)
	require.NoError(t, err)
	modes := map[string]courier.DispatchMode{}
	for _, q := range qs {
		modes[q.Name] = q.DispatchMode
	}
	require.Equal(t, courier.DispatchBatched, modes["cb"])
	require.Equal(t, courier.DispatchPerAttempt, modes[courier.DefaultQueueName])

	var pushes []api.TaskPush
	for len(pushes) < 3 {
		select {
		case b := <-batches:
			require.NotEmpty(t, b.ResultsURL)
			pushes = append(pushes, b.Tasks...)
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of 3 tasks pushed", len(pushes))
		}
	}

	var items []cc.TaskResultItem
	for _, p := range pushes {
		items = append(items, cc.TaskResultItem{TaskID: p.TaskID, TaskVersion: p.TaskVersion, TaskResult: api.TaskResult{Attempt: p.Attempt,
			Status: courier.OutcomeSuccess, StatusCode: 200, Message: "parsed", Result: json.RawMessage(`{"of":"` + p.TaskID + `"}`)}})
	}
	items = append(items,
		cc.TaskResultItem{TaskID: "cb-none", TaskVersion: 1, TaskResult: api.TaskResult{Attempt: 1, Status: courier.OutcomeSuccess}},
		cc.TaskResultItem{TaskID: pushes[0].TaskID, TaskVersion: 1, TaskResult: api.TaskResult{Attempt: pushes[0].Attempt, Status: "maybe"}})

	_, err = producer.ReportResults(ctx, items)
	require.ErrorIs(t, err, cc.ErrPermissionDenied, "results need the worker scope")
	_, err = wk.ReportResults(ctx, nil)
	requireField(t, err, cc.ErrValidation, "results")

	ans, err := wk.ReportResults(ctx, items)
	require.NoError(t, err)
	require.Len(t, ans.Results, len(items))
	for i, p := range pushes {
		a := ans.Results[i]
		require.Equal(t, http.StatusAccepted, a.Status, "%+v", a.Error)
		require.Equal(t, p.TaskID, a.TaskID, "answers in the request's order")
		require.NoError(t, cc.ResultError(a))
	}
	require.Equal(t, http.StatusNotFound, ans.Results[3].Status)
	require.ErrorIs(t, cc.ResultError(ans.Results[3]), cc.ErrNotFound)
	require.Equal(t, http.StatusUnprocessableEntity, ans.Results[4].Status)
	bad := cc.ResultError(ans.Results[4])
	require.ErrorIs(t, bad, cc.ErrValidation)
	var ae *cc.Error
	require.ErrorAs(t, bad, &ae)
	require.Equal(t, "status", ae.Field(), ae.Error())

	for _, p := range pushes {
		task, err := producer.GetTaskVersion(ctx, p.TaskID, 1)
		require.NoError(t, err)
		require.Equal(t, courier.TaskSuccess, task.Status, "recorded before the answer")
		require.JSONEq(t, `{"of":"`+p.TaskID+`"}`, string(task.Result))
		require.Equal(t, "parsed", task.Message)
	}
	again, err := wk.ReportResults(ctx, items[:1])
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, again.Results[0].Status)
	require.ErrorIs(t, cc.ResultError(again.Results[0]), cc.ErrConflict, "the attempt has its outcome")
	waitFor(t, "the slots are free", func() bool {
		q, err := admin.GetQueue(ctx, "cb")
		return err == nil && q.InFlight == 0
	})
}

// requireField checks err is sentinel and names field (when field is not empty).
func requireField(t *testing.T, err error, sentinel *cc.Error, field string) {
	t.Helper()
	require.ErrorIs(t, err, sentinel)
	var ae *cc.Error
	require.ErrorAs(t, err, &ae)
	if field != "" {
		require.Equal(t, field, ae.Field(), ae.Error())
	}
}

// A 429 carries Retry-After; with retries off the caller sees it, with the default policy the
// client waits it out and the insert goes through.
func TestClientRateLimitAndRetryAfter(t *testing.T) {
	cs := newClientStack(t)
	ctx := t.Context()
	_, err := cs.adminC.PutQueue(ctx, "slow", cc.QueueConfig{InsertRate: 1, InsertBurst: 1})
	require.NoError(t, err)
	once := cs.client(cs.producer, cc.WithRetry(cc.RetryPolicy{MaxAttempts: 1}))
	_, err = once.InsertTask(ctx, cc.TaskRequest{TaskID: "r-1", TaskVersion: 1, Queue: "slow"})
	require.NoError(t, err)
	_, err = once.InsertTask(ctx, cc.TaskRequest{TaskID: "r-2", TaskVersion: 1, Queue: "slow"})
	require.ErrorIs(t, err, cc.ErrRateLimited)
	var ae *cc.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusTooManyRequests, ae.StatusCode)
	require.Positive(t, ae.RetryAfter)

	var tries atomic.Int32
	counting := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		tries.Add(1)
		return http.DefaultTransport.RoundTrip(r)
	})}
	patient := cs.client(cs.producer, cc.WithHTTPClient(counting))
	for _, id := range []string{"r-3", "r-4", "r-5"} {
		task, err := patient.InsertTask(ctx, cc.TaskRequest{TaskID: id, TaskVersion: 1, Queue: "slow"})
		require.NoError(t, err)
		require.Equal(t, courier.TaskCreated, task.Outcome)
	}
	require.Greater(t, tries.Load(), int32(3), "three inserts at one a second met the limit and waited it out")
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// flaky breaks the first tries of the requests it is asked to: before they leave (a refused
// connection), after the gateway handled them (the answer is lost), or with a synthesized 503.
type flaky struct {
	mu    sync.Mutex
	fails map[string]int // "METHOD /path" → tries still to break
	mode  string         // "refused", "lost" or "503"
	seen  map[string]int // tries per "METHOD /path"
}

func (f *flaky) RoundTrip(r *http.Request) (*http.Response, error) {
	k := r.Method + " " + r.URL.Path
	f.mu.Lock()
	f.seen[k]++
	breakIt := f.fails[k] > 0
	if breakIt {
		f.fails[k]--
	}
	mode := f.mode
	f.mu.Unlock()
	if !breakIt {
		return http.DefaultTransport.RoundTrip(r)
	}
	switch mode {
	case "refused":
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	case "503":
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"0"}},
			Body: io.NopCloser(strings.NewReader("upstream unavailable")), Request: r}, nil
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return nil, errors.New("connection reset after the request was sent")
}

func (f *flaky) tries(k string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen[k]
}

// Retries against the real gateway: idempotent calls go through a flaky transport; a publish
// whose answer is lost is repeated under its idempotency key and finds its own record (one
// record, not two), as a task insert whose answer is lost finds its own task.
func TestClientRetriesThroughAFlakyTransport(t *testing.T) {
	cs := newClientStack(t)
	ctx := t.Context()
	policy := cc.WithRetry(cc.RetryPolicy{MaxAttempts: 4, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	with := func(f *flaky) *cc.Client {
		f.seen = map[string]int{}
		return cs.client(cs.admin, cc.WithHTTPClient(&http.Client{Transport: f}), policy)
	}

	f := &flaky{mode: "503", fails: map[string]int{"GET /v1/queues/default": 2}}
	q, err := with(f).GetQueue(ctx, "default")
	require.NoError(t, err)
	require.Equal(t, "default", q.Name)
	require.Equal(t, 3, f.tries("GET /v1/queues/default"))

	f = &flaky{mode: "refused", fails: map[string]int{"POST /v1/outbox": 2}}
	rec, err := with(f).Publish(ctx, cc.PublishRequest{Topic: "orders.refused", Payload: json.RawMessage(`1`)})
	require.NoError(t, err, "a connection never opened is retried, even for a publish")
	require.Equal(t, 3, f.tries("POST /v1/outbox"))
	require.Positive(t, rec.ID)

	f = &flaky{mode: "lost", fails: map[string]int{"POST /v1/outbox": 1}}
	rec, err = with(f).Publish(ctx, cc.PublishRequest{Topic: "orders.lost", Payload: json.RawMessage(`1`)})
	require.NoError(t, err, "a publish whose answer was lost is repeated under its idempotency key")
	require.Equal(t, 2, f.tries("POST /v1/outbox"))
	require.Equal(t, "existing", rec.Outcome, "the retry found the record the first try wrote")
	page, err := cs.producerC.ListOutbox(ctx, cc.OutboxQuery{Topic: "orders.lost"})
	require.NoError(t, err)
	require.Len(t, page.Items, 1, "the lost answer's record exists once")
	require.Equal(t, rec.ID, page.Items[0].ID)

	f = &flaky{mode: "lost", fails: map[string]int{"POST /v1/tasks": 1}}
	task, err := with(f).InsertTask(ctx, cc.TaskRequest{TaskID: "lost-1", TaskVersion: 1})
	require.NoError(t, err)
	require.Equal(t, 2, f.tries("POST /v1/tasks"))
	require.Equal(t, courier.TaskExisting, task.Outcome, "the retry found the task the first try created")

	f = &flaky{mode: "lost", fails: map[string]int{"POST /v1/timers": 1}}
	_, err = cs.adminC.PutBizType(ctx, "flaky", cc.BizTypeConfig{Delivery: courier.DeliveryMQ, Topic: "orders.flaky"})
	require.NoError(t, err)
	tm, err := with(f).CreateTimer(ctx, cc.TimerRequest{BizType: "flaky", BizID: "f-1", When: cc.After(time.Hour)})
	require.NoError(t, err)
	require.False(t, tm.Created, "the retry found the timer the first try armed")

	f = &flaky{mode: "refused", fails: map[string]int{"GET /v1/queues/default": 10}}
	_, err = with(f).GetQueue(ctx, "default")
	require.Error(t, err)
	require.Equal(t, 4, f.tries("GET /v1/queues/default"), "bounded by MaxAttempts")
}
