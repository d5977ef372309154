package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.temporal.io/server/temporaltest"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/devstack/embeddednats"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/mq/brokers"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/worker"
)

// restartableNATS is an embedded NATS JetStream server the test stops and starts again on the
// same port and store, as a cluster that goes down and comes back.
type restartableNATS struct {
	t    *testing.T
	dir  string
	port int
	srv  *embeddednats.Server
}

func startNATS(t *testing.T) *restartableNATS {
	t.Helper()
	n := &restartableNATS{t: t, dir: t.TempDir(), port: -1}
	n.start()
	_, port, err := net.SplitHostPort(strings.TrimPrefix(n.srv.URL(), "nats://"))
	require.NoError(t, err)
	_, err = fmt.Sscan(port, &n.port)
	require.NoError(t, err)
	t.Cleanup(func() { n.srv.Shutdown() })
	return n
}

func (n *restartableNATS) start() {
	srv, err := embeddednats.Start(embeddednats.Config{Port: n.port, StoreDir: n.dir})
	require.NoError(n.t, err)
	n.srv = srv
}

func (n *restartableNATS) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// The seed scenario on two clusters: the account service registers users, courier relays each
// registration's two records from the account database — points.> to RabbitMQ, coupons.> to
// NATS — and the consumers grant the rewards. While RabbitMQ is unreachable every coupon is
// still granted and the points wait; once it is back they are all granted. Then the same with
// NATS stopped and RabbitMQ up. In the end every user has one coupon and one points grant,
// every record is sent, and each consumer processed each message id once (a copy delivered
// twice is skipped as a duplicate).
func TestRegistrationOnTwoClusters(t *testing.T) {
	rabbit := newRabbit(t)
	natsSrv := startNATS(t)
	ctx := context.Background()

	// courier: Temporal, its own database, the account database as outbox source
	// "registration", and a router over the two clusters.
	ts := temporaltest.NewServer(temporaltest.WithT(t))
	tc := ts.GetDefaultClient()
	require.NoError(t, worker.EnsureSearchAttributes(ctx, tc, ts.GetDefaultNamespace()))
	courierDB, _ := testenv.Store(t, "sqlite")
	accountStore, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "registration.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = accountStore.Close() })
	require.NoError(t, SetupAccount(ctx, accountStore.DB()))

	pointsPub, err := brokers.DialNamed(rabbit.url(true), "courier")
	require.NoError(t, err)
	couponsPub, err := brokers.DialNamed(natsSrv.url(), "courier")
	require.NoError(t, err)
	router, err := mq.NewRouter(mq.RouterConfig{
		Brokers: []mq.Broker{{Name: "points", Publisher: pointsPub}, {Name: "coupons", Publisher: couponsPub}},
		Routes:  []mq.Route{{Pattern: "points.>", Broker: "points"}, {Pattern: "coupons.>", Broker: "coupons"}},
		Default: mq.NoDefaultBroker,
		Logger:  quietLogger(),
	})
	require.NoError(t, err)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		router.Watch(watchCtx, 200*time.Millisecond, time.Second)
	}()
	w, err := worker.New(worker.Config{
		Relay: relay.Config{PollInterval: 50 * time.Millisecond, Retry: courier.RetryPolicy{
			InitialInterval: 100 * time.Millisecond, BackoffCoef: 2, MaxInterval: time.Second,
			MaxAttempts: 100000, AttemptTimeout: 10 * time.Minute,
		}},
		ShutdownTimeout:         time.Second,
		MaxConcurrentActivities: 4, // few slots: a down cluster holding them would show
	}, worker.Deps{Temporal: tc, Publisher: router, Logger: quietLogger(), Sources: []relay.Source{
		{Name: courier.DefaultSource, Store: courierDB},
		{Name: "registration", Store: accountStore},
	}})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		w.Stop()
		stopWatch()
		<-watched
		_ = router.Close()
	})

	// The consumers: coupons from NATS, points from RabbitMQ (through the proxy the test cuts).
	rewards := openSQLite(t, "rewards.db")
	require.NoError(t, SetupRewards(ctx, rewards))
	var (
		mu      sync.Mutex
		outcome = map[string]map[Outcome]int{"coupon": {}, "points": {}}
	)
	observe := func(d Delivery) {
		mu.Lock()
		defer mu.Unlock()
		outcome[d.Consumer][d.Outcome]++
	}
	nc, err := nats.Connect(natsSrv.url(), nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = EnsureStream(ctx, js)
	require.NoError(t, err)
	stopCoupons, err := StartConsumer(ctx, js, &Handler{DB: rewards, Reward: CouponReward, Log: quietLogger(), Observe: observe})
	require.NoError(t, err)
	t.Cleanup(stopCoupons)
	subscribed := make(chan struct{}, 10)
	pointsCtx, stopPoints := context.WithCancel(ctx)
	pointsDone := make(chan error, 1)
	pc := &RabbitConsumer{URL: rabbit.url(true), Queue: rabbit.queue, Subscribed: func() { subscribed <- struct{}{} },
		Handler: &Handler{DB: rewards, Reward: PointsReward, Log: quietLogger(), Observe: observe}}
	go func() { pointsDone <- pc.Run(pointsCtx) }()
	t.Cleanup(func() {
		stopPoints()
		<-pointsDone
	})
	select {
	case <-subscribed: // the queue exists and is bound: courier's publishes are routable
	case <-time.After(30 * time.Second):
		t.Fatal("the points consumer did not subscribe")
	}

	// The account service.
	account := httptest.NewServer((&Account{DB: accountStore.DB(), Log: quietLogger()}).Handler())
	t.Cleanup(account.Close)
	users := 0
	register := func(n int) {
		for range n {
			users++
			status, body := post(t, account, fmt.Sprintf(`{"email":"user%d@example.com","name":"User %d"}`, users, users))
			require.Equal(t, http.StatusCreated, status, body)
		}
	}
	granted := func() (coupons, points int) {
		c, err := ListCoupons(ctx, rewards)
		require.NoError(t, err)
		p, err := ListPoints(ctx, rewards)
		require.NoError(t, err)
		return len(c), len(p)
	}
	waitGranted := func(wantCoupons, wantPoints int, why string) {
		t.Helper()
		require.Eventually(t, func() bool {
			c, p := granted()
			return c == wantCoupons && p == wantPoints
		}, 2*time.Minute, 50*time.Millisecond, why)
	}
	unsent := func(topic string) int {
		return count(t, accountStore.DB(), `SELECT count(*) FROM courier_outbox WHERE topic = ? AND status <> 'sent'`, topic)
	}

	register(3)
	waitGranted(3, 3, "both clusters up: every reward granted")

	// RabbitMQ unreachable (for courier and the points consumer): coupons keep flowing.
	rabbit.proxy.Cut()
	require.Eventually(t, func() bool { return !router.Up("points") }, 30*time.Second, 20*time.Millisecond)
	register(10)
	waitGranted(13, 3, "every coupon is granted while RabbitMQ is down; points wait")
	require.Equal(t, 10, unsent(TopicPoints), "the points records wait, unsent")
	rabbit.proxy.Restore()
	waitGranted(13, 13, "once RabbitMQ is back every points record is delivered and granted")

	// NATS stopped: points keep flowing.
	natsSrv.srv.Shutdown()
	require.Eventually(t, func() bool { return !router.Up("coupons") }, 30*time.Second, 20*time.Millisecond)
	register(10)
	waitGranted(13, 23, "every points grant is made while NATS is down; coupons wait")
	require.Equal(t, 10, unsent(TopicCoupons), "the coupons records wait, unsent")
	natsSrv.start()
	waitGranted(23, 23, "once NATS is back every coupons record is delivered and granted")

	// A consumer may grant as soon as the broker hands it the message, before courier's
	// delivery marks the record sent.
	require.Eventually(t, func() bool { return unsent(TopicCoupons)+unsent(TopicPoints) == 0 },
		30*time.Second, 20*time.Millisecond, "every record is sent")
	// A consumer reports a delivery after it has committed the grant and acked: the last
	// report may come a moment after the grant is visible.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return outcome["coupon"][Granted] >= 23 && outcome["points"][Granted] >= 23
	}, 30*time.Second, 20*time.Millisecond, "every grant reported")
	mu.Lock()
	for _, consumer := range []string{"coupon", "points"} {
		require.Equal(t, 23, outcome[consumer][Granted], "%s granted once per user", consumer)
		require.Zero(t, outcome[consumer][AlreadyGranted]+outcome[consumer][Rejected], consumer)
		t.Logf("%s: %d granted, %d duplicate deliveries skipped, %d retried", consumer,
			outcome[consumer][Granted], outcome[consumer][Duplicate], outcome[consumer][Retry])
	}
	mu.Unlock()
	// Each consumer recorded each message id once: one per user and reward.
	rows := processed(t, rewards)
	require.Len(t, rows, 2*23)
	seen := map[processedRow]bool{}
	for _, r := range rows {
		require.False(t, seen[r], "%v processed twice", r)
		seen[r] = true
		require.True(t, strings.HasPrefix(r.MessageID, "registration/"), r.MessageID)
	}
}
