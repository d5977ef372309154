package integration

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/server/temporaltest"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/devstack/embeddednats"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/mq/natsmq"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/timers"
	"github.com/courier-oss/courier/worker"
)

// natsCluster is one embedded NATS JetStream server that a test stops and starts again on the
// same address and data, as a cluster that goes down and comes back.
type natsCluster struct {
	t    *testing.T
	name string
	dir  string
	port int
	srv  *embeddednats.Server
}

func startCluster(t *testing.T, name string) *natsCluster {
	t.Helper()
	c := &natsCluster{t: t, name: name, dir: t.TempDir(), port: -1}
	c.start()
	_, port, err := net.SplitHostPort(strings.TrimPrefix(c.srv.URL(), "nats://"))
	require.NoError(t, err)
	_, err = fmt.Sscan(port, &c.port)
	require.NoError(t, err)
	t.Cleanup(c.stop)
	return c
}

func (c *natsCluster) start() {
	c.t.Helper()
	srv, err := embeddednats.Start(embeddednats.Config{Port: c.port, StoreDir: c.dir})
	require.NoError(c.t, err, "start NATS %s", c.name)
	c.srv = srv
}

func (c *natsCluster) stop() {
	if c.srv != nil {
		c.srv.Shutdown()
	}
}

func (c *natsCluster) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", c.port) }

// js connects a client (closed when the test ends).
func (c *natsCluster) js() jetstream.JetStream {
	c.t.Helper()
	nc, err := nats.Connect(c.url())
	require.NoError(c.t, err)
	c.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(c.t, err)
	return js
}

func (c *natsCluster) createStream(name string, subjects ...string) {
	c.t.Helper()
	_, err := c.js().CreateOrUpdateStream(c.t.Context(), jetstream.StreamConfig{
		Name: name, Subjects: subjects, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute,
	})
	require.NoError(c.t, err)
}

// ids counts a stream's messages by courier message id.
func (c *natsCluster) ids(stream string) map[string]int {
	c.t.Helper()
	ids, _ := (&stack{t: c.t, js: c.js()}).streamIDs(stream)
	return ids
}

// routedStack is courier with two brokers, "points" and "coupons", each its own NATS cluster.
type routedStack struct {
	t          *testing.T
	ns         string // the Temporal namespace
	tc         client.Client
	store      *store.Store
	points     *natsCluster
	coupons    *natsCluster
	metrics    *metrics.Brokers
	router     *mq.Router
	worker     *worker.Worker
	activity   int                 // the worker's outbox activity slots
	stopWorker func()              // stops the worker, its router's watch and the router
	logs       *logCapture         // what the worker, its Temporal client and the router log
	ordered    relay.OrderedConfig // the relay's ordered mode, set before route
}

// brokerRetry retries a record for as long as a test's outage lasts; an attempt may take ten
// minutes, so a publish that hangs on a stopped broker holds its activity slot for the whole
// test unless courier gives it back.
var brokerRetry = courier.RetryPolicy{
	InitialInterval: 100 * time.Millisecond,
	BackoffCoef:     2,
	MaxInterval:     time.Second,
	MaxAttempts:     100000,
	AttemptTimeout:  10 * time.Minute,
}

func newRoutedStack(t *testing.T) *routedStack {
	t.Helper()
	ts := temporaltest.NewServer(temporaltest.WithT(t))
	logs := &logCapture{}
	tc, err := client.Dial(client.Options{HostPort: ts.GetFrontendHostPort(), Namespace: ts.GetDefaultNamespace(),
		Logger: sdklog.NewStructuredLogger(slog.New(logs))})
	require.NoError(t, err)
	t.Cleanup(tc.Close)
	require.NoError(t, worker.EnsureSearchAttributes(t.Context(), tc, ts.GetDefaultNamespace()))
	st, _ := testenv.Store(t, "sqlite")
	s := &routedStack{t: t, ns: ts.GetDefaultNamespace(), tc: tc, store: st, points: startCluster(t, "points"), coupons: startCluster(t, "coupons"),
		activity: 4, logs: logs}
	s.points.createStream("POINTS", "points.>")
	s.coupons.createStream("COUPONS", "coupons.>")
	return s
}

// route builds the router over both clusters with routes (and no default broker) and starts
// a worker on it with few activity slots, so that slots held by a down broker would show.
func (s *routedStack) route(watch bool, routes ...mq.Route) {
	s.t.Helper()
	var brokers []mq.Broker
	for _, c := range []*natsCluster{s.points, s.coupons} {
		pub, err := natsmq.Dial(c.url(), "courier-test")
		require.NoError(s.t, err)
		brokers = append(brokers, mq.Broker{Name: c.name, Addr: c.url(), Publisher: pub})
	}
	s.metrics = metrics.NewBrokers(prometheus.NewRegistry(), []string{"points", "coupons"})
	r, err := mq.NewRouter(mq.RouterConfig{Brokers: brokers, Routes: routes, Default: mq.NoDefaultBroker,
		MaxInFlight: 2, Observer: s.metrics, Logger: slog.New(s.logs)})
	require.NoError(s.t, err)
	s.router = r
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if watch {
			r.Watch(ctx, 100*time.Millisecond, time.Second)
		}
	}()
	w, err := worker.New(worker.Config{
		Relay:                   relay.Config{BatchSize: 50, PollInterval: 50 * time.Millisecond, Retry: brokerRetry, Ordered: s.ordered},
		ShutdownTimeout:         time.Second,
		MaxConcurrentActivities: s.activity,
		Namespace:               s.ns,
		BizTypeRefresh:          100 * time.Millisecond,
	}, worker.Deps{Temporal: s.tc, Publisher: r, Logger: slog.New(s.logs), BizTypes: s.store, TimerRows: s.store,
		Sources: []relay.Source{{Name: courier.DefaultSource, Store: s.store}}})
	require.NoError(s.t, err)
	require.NoError(s.t, w.Start(s.t.Context()))
	s.worker = w
	stop := sync.OnceFunc(func() {
		w.Stop()
		cancel()
		<-done
		_ = r.Close()
	})
	s.t.Cleanup(stop)
	s.stopWorker = stop
}

// enqueue commits n records on topic in one transaction and returns their message ids.
func (s *routedStack) enqueue(topic string, n int) []string {
	s.t.Helper()
	var ids []int64
	require.NoError(s.t, s.store.DB().RunInTx(s.t.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
		msgs := make([]outbox.Message, n)
		for i := range msgs {
			msgs[i] = outbox.Message{Topic: topic, Key: fmt.Sprint(i), Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
		}
		var err error
		ids, err = outbox.Enqueue(ctx, tx, msgs...)
		return err
	}))
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = idString(id)
	}
	return out
}

// statuses reads the records' statuses by message id.
func (s *routedStack) statuses(ids []string) map[courier.OutboxStatus][]courier.OutboxRecord {
	s.t.Helper()
	out := map[courier.OutboxStatus][]courier.OutboxRecord{}
	for _, id := range ids {
		var n int64
		_, err := fmt.Sscan(id, &n)
		require.NoError(s.t, err)
		rec, err := s.store.GetOutbox(s.t.Context(), n)
		require.NoError(s.t, err)
		out[rec.Status] = append(out[rec.Status], rec)
	}
	return out
}

func (s *routedStack) allSent(ids []string) bool {
	return len(s.statuses(ids)[courier.OutboxSent]) == len(ids)
}

func requireOnce(t *testing.T, got map[string]int, want ...[]string) {
	t.Helper()
	n := 0
	for _, ids := range want {
		for _, id := range ids {
			require.Equal(t, 1, got[id], "message %s is in the stream exactly once", id)
			n++
		}
	}
	require.Len(t, got, n, "the stream holds nothing else")
}

// One broker down delays only its own records: while the points cluster is stopped, every
// coupons record is delivered (with four activity slots for sixty records, ten times as many
// as the slots, so hung publishes holding slots would stall them), the points records wait and
// retry with backoff; once points is back they are all delivered, each once in its stream. A
// topic no route matches goes dead at once with the reason, and is delivered after a redrive
// once the routes send it somewhere.
//
// "health checks" runs the router's watch (a failed check cancels the hung publishes and
// fails new ones at once); "in-flight bound" runs without it, so only the per-broker bound on
// publishes in flight keeps the stopped cluster's hung publishes from taking every slot.
func TestBrokerDownDelaysOnlyItsOwnRecords(t *testing.T) {
	routes := []mq.Route{{Pattern: "points.>", Broker: "points"}, {Pattern: "coupons.>", Broker: "coupons"}}
	for _, tc := range []struct {
		name  string
		watch bool
		why   string // the error a waiting points record shows
	}{
		{"health checks", true, "broker is down"},
		{"in-flight bound", false, "publishes in flight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRoutedStack(t)
			s.route(tc.watch, routes...)

			warm := [][]string{s.enqueue("points.granted", 5), s.enqueue("coupons.granted", 5)}
			require.Eventually(t, func() bool { return s.allSent(warm[0]) && s.allSent(warm[1]) },
				time.Minute, 50*time.Millisecond, "both brokers deliver while up")

			s.points.stop()
			if tc.watch {
				require.Eventually(t, func() bool { return !s.router.Up("points") }, 30*time.Second, 20*time.Millisecond)
				require.Equal(t, 0.0, value(s.metrics.UpGauge.WithLabelValues("points")))
				require.Equal(t, 1.0, value(s.metrics.UpGauge.WithLabelValues("coupons")))
			}
			points := s.enqueue("points.granted", 30)
			coupons := s.enqueue("coupons.granted", 60)
			lost := s.enqueue("orders.created", 1)

			require.Eventually(t, func() bool { return s.allSent(coupons) }, 2*time.Minute, 50*time.Millisecond,
				"every coupons record is delivered while points is down")
			byStatus := s.statuses(points)
			require.Empty(t, byStatus[courier.OutboxSent], "points is still down: none of its records is sent")
			require.Eventually(t, func() bool {
				for _, rec := range s.statuses(points)[courier.OutboxDispatched] {
					if rec.Attempts > 0 && strings.Contains(rec.LastError, tc.why) {
						return true
					}
				}
				return false
			}, time.Minute, 50*time.Millisecond, "points records retry, saying why")

			require.Eventually(t, func() bool { return len(s.statuses(lost)[courier.OutboxDead]) == 1 }, time.Minute, 50*time.Millisecond)
			dead := s.statuses(lost)[courier.OutboxDead][0]
			require.True(t, strings.HasPrefix(dead.LastError, `mq: no broker routes topic "orders.created": no route matches it and there is no default broker (routes: points.>=points,coupons.>=coupons)`), dead.LastError)
			require.Equal(t, 1.0, value(s.metrics.NoRoute))

			s.points.start()
			require.Eventually(t, func() bool { return s.allSent(points) }, 3*time.Minute, 100*time.Millisecond,
				"points records are delivered once points is back")
			// The outage is an expected condition, not a stream of errors: no attempt of a
			// record that waited for it is logged as an error, and the one record that went dead
			// is logged once. With health checks the broker's outage is logged once as it starts
			// and once, with its length, as it ends.
			require.Zero(t, s.logs.count(slog.LevelError, "Activity error"), "retries are not errors")
			require.Equal(t, 1, s.logs.count(slog.LevelError, "outbox record is dead"), "the dead record, once")
			if tc.watch {
				// Once per transition (a loaded machine's health checks may flap, each flap a pair of
				// lines), never a line per retry: the retries themselves log nothing at ERROR.
				require.Eventually(t, func() bool {
					return s.logs.count(slog.LevelInfo, "broker is up again") >= 1 &&
						s.logs.count(slog.LevelInfo, "broker is up again") == s.logs.count(slog.LevelWarn, "broker is down")
				}, 30*time.Second, 50*time.Millisecond, "each outage is logged as it starts and as it ends")

				up, _ := s.logs.find("broker is up again")
				require.Equal(t, "points", up.attrs["broker"])
				require.NotEmpty(t, up.attrs["outage"])
			}
			requireOnce(t, s.points.ids("POINTS"), warm[0], points)
			requireOnce(t, s.coupons.ids("COUPONS"), warm[1], coupons)
			require.GreaterOrEqual(t, value(s.metrics.Acked.WithLabelValues("coupons")), 65.0)
			require.Greater(t, value(s.metrics.Errors.WithLabelValues("points", map[bool]string{true: metrics.ReasonDown, false: metrics.ReasonBusy}[tc.watch])), 0.0)

			// A configuration change routes orders.> to coupons: the dead record is redriven
			// and delivered there.
			s.stopWorker()
			s.coupons.createStream("ORDERS", "orders.>")
			s.route(tc.watch, append(routes, mq.Route{Pattern: "orders.>", Broker: "coupons"})...)
			gw := httptest.NewServer(gateway.New(gateway.Config{}, gateway.Deps{Keys: s.store, Outbox: s.store,
				Wake: s.worker.Relay().Wake, Logger: quiet, Runs: relay.DeliveryRuns{Temporal: s.tc, Wait: 2 * time.Second}}))
			t.Cleanup(gw.Close)
			_, token, err := s.store.CreateAPIKey(t.Context(), "admin", []apikey.Scope{apikey.ScopeAdmin})
			require.NoError(t, err)
			resp := do(t, http.MethodPost, fmt.Sprintf("%s/v1/outbox/%s/redrive", gw.URL, lost[0]), token, nil)
			require.Equal(t, http.StatusAccepted, resp.StatusCode)
			require.Eventually(t, func() bool { return s.allSent(lost) }, time.Minute, 50*time.Millisecond)
			requireOnce(t, s.coupons.ids("ORDERS"), lost)
		})
	}
}

// Timers that deliver to the MQ take the same routes: each business type's topic reaches its
// own cluster.
func TestTimerDeliveriesAreRouted(t *testing.T) {
	s := newRoutedStack(t)
	s.route(true, mq.Route{Pattern: "points.>", Broker: "points"}, mq.Route{Pattern: "coupons.>", Broker: "coupons"})
	ctx := t.Context()
	svc := timers.New(s.tc, s.ns, s.store, s.store, relay.DefaultTaskQueue)
	for name, topic := range map[string]string{"coupon-expiry": "coupons.expiring", "points-expiry": "points.expiring"} {
		_, _, err := s.store.PutBizType(ctx, courier.BizType{Name: name, Delivery: courier.DeliveryMQ, Topic: topic})
		require.NoError(t, err)
		delay := 10 * time.Millisecond
		_, _, err = svc.Create(ctx, api.TimerRequest{BizType: name, BizID: "u-1", When: api.After(delay), Payload: []byte(`{"user":1}`)})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return len(s.points.ids("POINTS")) == 1 && len(s.coupons.ids("COUPONS")) == 1
	}, time.Minute, 100*time.Millisecond, "each timer's message reaches its own cluster")
	for id := range s.points.ids("POINTS") {
		require.True(t, strings.HasPrefix(id, courier.TimerWorkflowID("points-expiry", "u-1")+"/"), id)
	}
	for id := range s.coupons.ids("COUPONS") {
		require.True(t, strings.HasPrefix(id, courier.TimerWorkflowID("coupon-expiry", "u-1")+"/"), id)
	}
}

// value reads a counter's or gauge's current value.
func value(m prometheus.Metric) float64 {
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		panic(err)
	}
	if pb.Gauge != nil {
		return pb.GetGauge().GetValue()
	}
	return pb.GetCounter().GetValue()
}
