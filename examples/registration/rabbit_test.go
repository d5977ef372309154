package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/mq/brokers"
	"github.com/courier-oss/courier/mq/mqtest"
)

// rabbitFixture is a private exchange and queue names on the test RabbitMQ (shared with other
// tests: every name is unique and deleted at the end), and a proxy in front of the server that
// a test cuts to make RabbitMQ unreachable.
type rabbitFixture struct {
	direct   string // the server's URL
	proxy    *mqtest.Proxy
	exchange string
	queue    string
}

func newRabbit(t *testing.T) *rabbitFixture {
	t.Helper()
	direct := mqtest.RabbitMQURL(t) // skips (outside CI) without a server
	u, err := url.Parse(direct)
	require.NoError(t, err)
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	f := &rabbitFixture{direct: direct, proxy: mqtest.NewProxy(t, u.Host),
		exchange: "registration-test-" + suffix, queue: "registration.points-" + suffix}
	t.Cleanup(func() {
		conn, err := amqp.Dial(direct)
		if err != nil {
			return
		}
		defer conn.Close()
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(f.queue, false, false, false)
			_ = ch.ExchangeDelete(f.exchange, false, false)
			_ = ch.Close()
		}
	})
	return f
}

// url is courier's form of the URL through the proxy (or straight to the server).
func (f *rabbitFixture) url(viaProxy bool) string {
	u, _ := url.Parse(f.direct)
	if viaProxy {
		u.Host = f.proxy.Addr()
	}
	u.RawQuery = url.Values{"exchange": {f.exchange}}.Encode()
	return u.String()
}

// The RabbitMQ consumer grants points once per user: a message published twice (RabbitMQ
// cannot drop the copy), a second event for the same user, and a failure that rolls back and
// is requeued change nothing; it acknowledges only after its commit, counts deliveries from the
// quorum queue, and resubscribes by itself after the connection is cut.
func TestRabbitConsumerGrantsOnceAndReconnects(t *testing.T) {
	f := newRabbit(t)
	db := openSQLite(t, "rewards.db")
	ctx := context.Background()
	require.NoError(t, SetupRewards(ctx, db))

	var (
		mu         sync.Mutex
		deliveries []Delivery
		failures   atomic.Int32
	)
	h := &Handler{DB: db, Reward: PointsReward, Log: quietLogger(), NakDelay: 50 * time.Millisecond,
		Observe: func(d Delivery) {
			mu.Lock()
			defer mu.Unlock()
			deliveries = append(deliveries, d)
		},
		BeforeCommit: func(_ context.Context, id string) error {
			if id == "registration/9" && failures.Add(1) == 1 {
				return errors.New("injected failure before commit")
			}
			return nil
		}}
	subscribed := make(chan struct{}, 10)
	c := &RabbitConsumer{URL: f.url(true), Queue: f.queue, Handler: h, Subscribed: func() { subscribed <- struct{}{} }}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	select {
	case <-subscribed:
	case <-time.After(30 * time.Second):
		t.Fatal("the consumer did not subscribe")
	}

	// courier's own RabbitMQ adapter publishes, straight to the server.
	pub, err := brokers.DialNamed(f.url(false), "registration-test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	send := func(id string, user int64) {
		body, err := json.Marshal(UserRegistered{UserID: user, Email: "u@example.com", RegisteredAt: time.Now().UTC()})
		require.NoError(t, err)
		require.NoError(t, pub.Publish(ctx, mq.Message{ID: id, Topic: TopicPoints, Key: "k", Payload: body}))
	}
	grants := func() int {
		rows, err := ListPoints(ctx, db)
		require.NoError(t, err)
		return len(rows)
	}
	send("registration/1", 1)
	send("registration/1", 1) // the same record published again
	send("registration/3", 1) // another event for user 1
	send("registration/9", 2) // fails once, then is granted
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(deliveries) == 5
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, 2, grants())
	mu.Lock()
	outcomes := map[Outcome]int{}
	for _, d := range deliveries {
		outcomes[d.Outcome]++
		if d.MessageID == "registration/9" && d.Outcome == Granted {
			require.Equal(t, uint64(2), d.Attempt, "the quorum queue counts the redelivery")
		}
	}
	mu.Unlock()
	require.Equal(t, map[Outcome]int{Granted: 2, Duplicate: 1, AlreadyGranted: 1, Retry: 1}, outcomes)

	// Cut the connection; a message published meanwhile is consumed once it is back.
	f.proxy.Cut()
	send("registration/11", 3)
	f.proxy.Restore()
	select {
	case <-subscribed:
	case <-time.After(30 * time.Second):
		t.Fatal("the consumer did not resubscribe")
	}
	require.Eventually(t, func() bool { return grants() == 3 }, 30*time.Second, 20*time.Millisecond)

	stop()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the consumer did not stop")
	}
	require.Equal(t, []processedRow{
		{"points", "registration/1"}, {"points", "registration/11"}, {"points", "registration/3"}, {"points", "registration/9"},
	}, processed(t, db))
}
