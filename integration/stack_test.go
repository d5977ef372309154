package integration

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/server/temporaltest"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/devstack/embeddednats"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/mq/natsmq"
	"github.com/courier-oss/courier/pauses"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/timers"
	"github.com/courier-oss/courier/webhook"
	"github.com/courier-oss/courier/worker"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerRoleEnv) != "" {
		os.Exit(runWorkerProcess())
	}
	os.Exit(m.Run())
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testRetry keeps the tests quick: short waits, a small budget, short attempts (so a crashed
// worker's attempts are retried elsewhere within seconds).
var testRetry = courier.RetryPolicy{
	InitialInterval: 100 * time.Millisecond,
	BackoffCoef:     2,
	MaxInterval:     time.Second,
	MaxAttempts:     3,
	AttemptTimeout:  3 * time.Second,
}

// stack is one test's real components.
type stack struct {
	t     *testing.T
	ts    *temporaltest.TestServer
	tc    client.Client
	nats  *embeddednats.Server
	js    jetstream.JetStream
	store *store.Store
	dsn   string
	pub   *natsmq.Publisher

	rcv    *receiver // timer callbacks, started by callbacks()
	secret string
	rcvURL string

	// paused, when set before timerWorker, is the pauses its worker obeys.
	paused *pauses.Watcher
}

// watchPauses gives the workers started from now on the pauses in the stack's database, read
// every 200 ms and, on PostgreSQL, at each change's commit.
func (s *stack) watchPauses() *pauses.Watcher {
	w := pauses.NewWatcher(s.store, 200*time.Millisecond, quiet)
	require.NoError(s.t, w.Start(s.t.Context()))
	stop := s.store.Listen(s.t.Context(), store.PausesChannel, w.Kick, quiet)
	s.t.Cleanup(stop)
	s.paused = w
	return w
}

// newStack starts the components; opts tune the Temporal test server (its dynamic config, say).
func newStack(t *testing.T, dialect string, opts ...temporaltest.TestServerOption) *stack {
	t.Helper()
	ctx := t.Context()
	ts := temporaltest.NewServer(append([]temporaltest.TestServerOption{temporaltest.WithT(t)}, opts...)...)
	tc := ts.GetDefaultClient()
	require.NoError(t, worker.EnsureSearchAttributes(ctx, tc, ts.GetDefaultNamespace()))

	ns, err := embeddednats.Start(embeddednats.Config{Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	st, dsn := testenv.Store(t, dialect)
	pub, err := natsmq.Dial(ns.URL(), "courier-test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return &stack{t: t, ts: ts, tc: tc, nats: ns, js: js, store: st, dsn: dsn, pub: pub}
}

func (s *stack) createStream(name string, subjects ...string) {
	s.t.Helper()
	_, err := s.js.CreateOrUpdateStream(s.t.Context(), jetstream.StreamConfig{
		Name: name, Subjects: subjects, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
	})
	require.NoError(s.t, err)
}

func (s *stack) startWorker(disableRelay bool) *worker.Worker {
	s.t.Helper()
	w, err := worker.New(worker.Config{
		Relay:           relay.Config{BatchSize: 50, PollInterval: 50 * time.Millisecond, Lease: 2 * time.Second, Retry: testRetry},
		ShutdownTimeout: 5 * time.Second,
		DisableRelay:    disableRelay,
	}, worker.Deps{
		Temporal:  s.tc,
		Sources:   []relay.Source{{Name: courier.DefaultSource, Store: s.store}},
		Publisher: s.pub,
		Logger:    quiet,
	})
	require.NoError(s.t, err)
	require.NoError(s.t, w.Start(s.t.Context()))
	s.t.Cleanup(w.Stop)
	return w
}

// gateway serves the real gateway over HTTP and returns its URL and an admin token.
func (s *stack) gateway(wake func()) (string, string) {
	s.t.Helper()
	_, token, err := s.store.CreateAPIKey(s.t.Context(), "test-admin", []apikey.Scope{apikey.ScopeAdmin})
	require.NoError(s.t, err)
	h := gateway.New(gateway.Config{}, gateway.Deps{Keys: s.store, Outbox: s.store, Wake: wake, Logger: quiet,
		Runs: relay.DeliveryRuns{Temporal: s.tc, Wait: 2 * time.Second}})
	srv := httptest.NewServer(h)
	s.t.Cleanup(srv.Close)
	return srv.URL, token
}

// streamIDs reads every message of a stream and counts them by courier message id.
func (s *stack) streamIDs(stream string) (map[string]int, [][]byte) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), 30*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, stream)
	require.NoError(s.t, err)
	info, err := st.Info(ctx)
	require.NoError(s.t, err)
	counts := map[string]int{}
	var payloads [][]byte
	if info.State.Msgs == 0 {
		return counts, nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(s.t, err)
	for got := uint64(0); got < info.State.Msgs; {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
		require.NoError(s.t, err)
		for m := range batch.Messages() {
			counts[m.Headers().Get(mq.HeaderMessageID)]++
			payloads = append(payloads, m.Data())
			got++
		}
		require.NoError(s.t, batch.Error())
	}
	return counts, payloads
}

func (s *stack) countByStatus() map[courier.OutboxStatus]int64 {
	st, err := s.store.OutboxStats(s.t.Context())
	require.NoError(s.t, err)
	return st.ByStatus
}

func idString(id int64) string { return fmt.Sprint(id) }

// callbacks returns the stack's callback receiver (started on first use) and its secret.
func (s *stack) callbacks() (*receiver, string) {
	if s.rcv == nil {
		secret, err := webhook.GenerateSecret()
		require.NoError(s.t, err)
		verifier, err := webhook.NewVerifier(secret)
		require.NoError(s.t, err)
		s.rcv, s.secret = &receiver{got: map[string][]time.Time{}, verifier: verifier}, secret
		s.rcvURL = startHTTP(s.t, s.rcv)
	}
	return s.rcv, s.secret
}

// bizType configures an http business type that calls back the stack's receiver.
func (s *stack) bizType(name string, rate float64) *receiver {
	rcv, secret := s.callbacks()
	_, _, err := s.store.PutBizType(s.t.Context(), courier.BizType{Name: name, Delivery: courier.DeliveryHTTP,
		CallbackURL: s.rcvURL, Secrets: []string{secret}, RateLimit: rate})
	require.NoError(s.t, err)
	return rcv
}

// timerWorker starts a worker that delivers timers (and relays the outbox when relay is set).
// It reads business types through a cache of its own, as courier's worker process does.
func (s *stack) timerWorker(relayOn bool) {
	bizTypes := s.store.NewBizTypeCache(0, quiet)
	s.t.Cleanup(func() { _ = bizTypes.Close() })
	w, err := worker.New(worker.Config{
		Relay:                  relay.Config{PollInterval: 50 * time.Millisecond, Retry: testRetry},
		DisableRelay:           !relayOn,
		Namespace:              s.ts.GetDefaultNamespace(),
		AllowLoopbackCallbacks: true,
		BizTypeRefresh:         100 * time.Millisecond,
	}, worker.Deps{Temporal: s.tc, Publisher: s.pub, Logger: quiet, BizTypes: bizTypes, TimerRows: s.store,
		Sources: []relay.Source{{Name: courier.DefaultSource, Store: s.store}}, Pauses: s.paused})
	require.NoError(s.t, err)
	require.NoError(s.t, w.Start(s.t.Context()))
	s.t.Cleanup(w.Stop)
}

// timerService is the timer API's service on the stack.
func (s *stack) timerService() *timers.Service {
	return timers.New(s.tc, s.ts.GetDefaultNamespace(), s.store, s.store, relay.DefaultTaskQueue)
}

func startHTTP(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
