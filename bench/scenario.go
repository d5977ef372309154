package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/schema"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/webhook"
	"github.com/courier-oss/courier/worker"
)

// What every scenario sets up alike: a logger that keeps courier quiet, its databases, and
// (the timer scenarios) the worker and where deliveries arrive.

// quietLogger is the logger of the courier a scenario runs: the bench prints its own table.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// scratchSQLite is the URL of a fresh SQLite file in a directory of its own, which remove
// deletes.
func scratchSQLite(prefix string) (url string, remove func(), err error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	return "sqlite:" + filepath.Join(dir, "bench.db"), func() { _ = os.RemoveAll(dir) }, nil
}

// forEachDatabase runs fn on a fresh SQLite file (in a directory named by prefix) and then,
// when pgURL is set, on a scratch schema of that PostgreSQL database (dropped afterwards).
func forEachDatabase(ctx context.Context, prefix, pgURL string, fn func(name, url string) error) error {
	sqlite, remove, err := scratchSQLite(prefix)
	if err != nil {
		return err
	}
	defer remove()
	if err := fn("sqlite", sqlite); err != nil || pgURL == "" {
		return err
	}
	u, drop, err := scratchSchema(ctx, pgURL)
	if err != nil {
		return err
	}
	defer drop()
	return fn("postgres", u)
}

// openDB opens a scenario's database with courier's schema up; the caller closes it.
func openDB(ctx context.Context, url string) (*store.Store, error) {
	st, err := store.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	if err := schema.Up(ctx, st.DB(), schema.AllSets...); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// startTimerWorker starts the worker of a timer scenario on its queue: timers only (no relay,
// no tasks), their business types read through a cache as courier's worker reads them and
// re-read every 200 ms, callbacks allowed to this machine. stop stops both.
func startTimerWorker(ctx context.Context, stack Stack, st *store.Store, pub mq.Publisher, queue string) (stop func(), err error) {
	bizTypes := st.NewBizTypeCache(0, quietLogger())
	w, err := worker.Start(ctx, worker.Config{DisableRelay: true, AllowLoopbackCallbacks: true, BizTypeRefresh: 200 * time.Millisecond,
		Namespace: stack.namespace(), Relay: relay.Config{TaskQueue: queue}},
		worker.Deps{Temporal: stack.Temporal, Publisher: pub, Logger: quietLogger(), BizTypes: bizTypes, TimerRows: st,
			Sources: worker.DefaultSources(st)})
	if err != nil {
		bizTypes.Close()
		return nil, err
	}
	return func() {
		w.Stop()
		bizTypes.Close()
	}, nil
}

// timerTarget sets up where a timer scenario's deliveries arrive, by b's delivery: a JetStream
// stream named stream capturing subject on the stack's NATS (b.Topic), or a local HTTP receiver
// with a fresh signing secret (b.CallbackURL, b.Secrets). Each arrival's body goes to record;
// closeTarget removes the stream and stops the receiver.
func timerTarget(ctx context.Context, stack Stack, b *courier.BizType, stream, subject string, record func(body []byte, at time.Time)) (closeTarget func(), err error) {
	switch b.Delivery {
	case courier.DeliveryMQ:
		nc, err := nats.Connect(stack.NATSURL)
		if err != nil {
			return nil, err
		}
		js, err := jetstream.New(nc)
		if err == nil {
			_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}, Storage: jetstream.FileStorage})
		}
		var sub *nats.Subscription
		if err == nil {
			sub, err = nc.Subscribe(subject, func(m *nats.Msg) { record(m.Data, time.Now()) })
		}
		if err != nil {
			nc.Close()
			return nil, err
		}
		_ = sub.SetPendingLimits(-1, -1) // a burst of deliveries must not be dropped as a slow consumer's
		b.Topic = subject
		return func() {
			_ = sub.Unsubscribe()
			_ = js.DeleteStream(context.Background(), stream)
			nc.Close()
		}, nil
	case courier.DeliveryHTTP:
		secret, err := webhook.GenerateSecret()
		if err != nil {
			return nil, err
		}
		rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			record(body, time.Now())
		}))
		b.CallbackURL, b.Secrets = rcv.URL, []string{secret}
		return rcv.Close, nil
	}
	return nil, fmt.Errorf("bench: unknown delivery %q", b.Delivery)
}
