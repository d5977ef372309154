package rabbitmq_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/mq/mqtest"
	"github.com/courier-oss/courier/mq/rabbitmq"
)

// rabbit is the test RabbitMQ server, reached by the publishers under test through a proxy the
// test can cut, and by the test itself directly. Each test gets an exchange and queues of its
// own, deleted when it ends.
type rabbit struct {
	direct string // URL of the server
	proxy  *mqtest.Proxy
	admin  *amqp.Connection
	prefix string

	mu     sync.Mutex
	queues []string
	exchs  []string
}

func startRabbit(t *testing.T) *rabbit {
	t.Helper()
	direct := mqtest.RabbitMQURL(t)
	u, err := url.Parse(direct)
	require.NoError(t, err)
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5672")
	}
	admin, err := amqp.Dial(direct)
	require.NoError(t, err)
	var b [4]byte
	_, _ = rand.Read(b[:])
	r := &rabbit{direct: direct, proxy: mqtest.NewProxy(t, target), admin: admin, prefix: "courier-test-" + hex.EncodeToString(b[:])}
	t.Cleanup(func() {
		if ch, err := admin.Channel(); err == nil {
			for _, q := range r.queues {
				_, _ = ch.QueueDelete(q, false, false, false)
			}
			for _, e := range r.exchs {
				_ = ch.ExchangeDelete(e, false, false)
			}
			_ = ch.Close()
		}
		_ = admin.Close()
	})
	return r
}

// url is the URL of the server through the proxy, with the given query.
func (r *rabbit) url(t *testing.T, query url.Values) string {
	u, err := url.Parse(r.direct)
	require.NoError(t, err)
	u.Host = r.proxy.Addr()
	u.RawQuery = query.Encode()
	return u.String()
}

// exchange returns a fresh exchange name, deleted when the test ends.
func (r *rabbit) exchange(name string) string {
	e := r.prefix + "-" + name
	r.mu.Lock()
	r.exchs = append(r.exchs, e)
	r.mu.Unlock()
	return e
}

// bind declares a durable queue bound to exchange by routing key and returns its name.
func (r *rabbit) bind(t *testing.T, exchange, key string) string {
	t.Helper()
	ch, err := r.admin.Channel()
	require.NoError(t, err)
	defer ch.Close()
	if exchange != "" {
		require.NoError(t, ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil))
	}
	q := r.prefix + "-q-" + key
	if exchange == "" {
		q = key // the default exchange routes by queue name
	}
	_, err = ch.QueueDeclare(q, true, false, false, false, nil)
	require.NoError(t, err)
	if exchange != "" {
		require.NoError(t, ch.QueueBind(q, key, exchange, false, nil))
	}
	r.mu.Lock()
	r.queues = append(r.queues, q)
	r.mu.Unlock()
	return q
}

// read returns what queue holds, leaving it there.
func (r *rabbit) read(t *testing.T, queue string) []mqtest.Received {
	t.Helper()
	ch, err := r.admin.Channel()
	require.NoError(t, err)
	defer ch.Close() // requeues what was read
	var out []mqtest.Received
	for range 10000 {
		d, ok, err := ch.Get(queue, false)
		require.NoError(t, err)
		if !ok {
			break
		}
		require.Equal(t, amqp.Persistent, d.DeliveryMode, "published persistent")
		got := mqtest.Received{ID: d.MessageId, Payload: d.Body, Headers: map[string]string{}}
		for k, v := range d.Headers {
			s, isString := v.(string)
			require.True(t, isString, "header %q is a string, not %T", k, v)
			got.Headers[k] = s
		}
		got.Key = got.Headers[mq.HeaderKey]
		out = append(out, got)
	}
	return out
}

// The publisher conformance suite against the real RabbitMQ server, through a TCP proxy that
// cutting closes: the default mapping (a topic exchange, the topic as routing key, a durable
// queue bound by the topic).
func TestRabbitMQConformance(t *testing.T) {
	r := startRabbit(t)
	exchange := r.exchange("conformance")
	queues := map[string]string{}
	var mu sync.Mutex
	pubURL := r.url(t, url.Values{"exchange": {exchange}})
	mqtest.Run(t, mqtest.Harness{
		NewPublisher: func(t *testing.T) mq.Publisher {
			pub, err := rabbitmq.Dial(pubURL, "conformance")
			require.NoError(t, err)
			return pub
		},
		CreateTopic: func(t *testing.T, topic string) {
			q := r.bind(t, exchange, topic)
			mu.Lock()
			queues[topic] = q
			mu.Unlock()
		},
		Read: func(t *testing.T, topic string) []mqtest.Received {
			mu.Lock()
			q := queues[topic]
			mu.Unlock()
			return r.read(t, q)
		},
		Cut:     func(*testing.T) { r.proxy.Cut() },
		Restore: func(*testing.T) { r.proxy.Restore() },
	})
}

// The publisher declares its exchange (a durable topic exchange) when it is missing; a queue
// bound by pattern receives every topic it matches.
func TestRabbitMQDeclaresExchange(t *testing.T) {
	r := startRabbit(t)
	exchange := r.exchange("declared")
	pub, err := rabbitmq.Dial(r.url(t, url.Values{"exchange": {exchange}}), "test")
	require.NoError(t, err)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, pub.Ping(ctx), "the first connection declares the exchange")

	ch, err := r.admin.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, ch.ExchangeDeclarePassive(exchange, amqp.ExchangeTopic, true, false, false, false, nil))

	q := r.bind(t, exchange, "orders.*")
	require.NoError(t, pub.Publish(ctx, mq.Message{ID: "1", Topic: "orders.created", Payload: []byte("a")}))
	require.NoError(t, pub.Publish(ctx, mq.Message{ID: "2", Topic: "orders.paid", Payload: []byte("b")}))
	require.ErrorIs(t, pub.Publish(ctx, mq.Message{ID: "3", Topic: "orders.eu.created", Payload: []byte("c")}), mq.ErrUnknownTopic,
		"'*' matches one word: no queue takes orders.eu.created")
	got := r.read(t, q)
	require.Len(t, got, 2)
	require.Equal(t, "1", got[0].ID)
	require.Equal(t, "2", got[1].ID)
}

// With declare=0 a missing exchange is ErrUnknownTopic for every publish (also after the
// broker closed the channel for it) and Ping says so; once the operator creates it, publishing
// works on the same publisher.
func TestRabbitMQMissingExchange(t *testing.T) {
	r := startRabbit(t)
	exchange := r.exchange("missing")
	pub, err := rabbitmq.Dial(r.url(t, url.Values{"exchange": {exchange}, "declare": {"0"}}), "test")
	require.NoError(t, err)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range 2 {
		err := pub.Publish(ctx, mq.Message{ID: fmt.Sprint(i), Topic: "orders.created", Payload: []byte("x")})
		require.ErrorIs(t, err, mq.ErrUnknownTopic, "attempt %d", i)
	}
	require.ErrorContains(t, pub.Ping(ctx), exchange)

	q := r.bind(t, exchange, "orders.created")
	require.NoError(t, pub.Ping(ctx))
	require.NoError(t, pub.Publish(ctx, mq.Message{ID: "ok", Topic: "orders.created", Payload: []byte("x")}))
	require.Len(t, r.read(t, q), 1)
}

// exchange= (empty) publishes to the default exchange, which routes by queue name.
func TestRabbitMQDefaultExchange(t *testing.T) {
	r := startRabbit(t)
	topic := r.prefix + ".direct"
	q := r.bind(t, "", topic)
	pub, err := rabbitmq.Dial(r.url(t, url.Values{"exchange": {""}}), "test")
	require.NoError(t, err)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, pub.Ping(ctx))
	require.NoError(t, pub.Publish(ctx, mq.Message{ID: "1", Topic: topic, Key: "k", Payload: []byte("x")}))
	require.ErrorIs(t, pub.Publish(ctx, mq.Message{ID: "2", Topic: topic + "-none", Payload: []byte("x")}), mq.ErrUnknownTopic)
	got := r.read(t, q)
	require.Len(t, got, 1)
	require.Equal(t, "k", got[0].Key)
}

// Returns are matched to their own publish when routable and unroutable messages, some with
// the same message id, are in flight together on the one channel.
func TestRabbitMQReturnsMatchTheirPublish(t *testing.T) {
	r := startRabbit(t)
	exchange := r.exchange("mixed")
	q := r.bind(t, exchange, "mixed.routed")
	pub, err := rabbitmq.Dial(r.url(t, url.Values{"exchange": {exchange}}), "test")
	require.NoError(t, err)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	const n = 200
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			topic := "mixed.routed"
			if i%2 == 1 {
				topic = "mixed.unrouted"
			}
			// Pairs share a message id: only the routing key tells their returns apart.
			errs[i] = pub.Publish(ctx, mq.Message{ID: fmt.Sprint(i / 2), Topic: topic, Payload: []byte("x")})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i%2 == 0 {
			require.NoError(t, err, "routed %d", i)
		} else {
			require.ErrorIs(t, err, mq.ErrUnknownTopic, "unrouted %d", i)
		}
	}
	require.Len(t, r.read(t, q), n/2)
}
