package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/mq/rabbitmq"
)

// DefaultRabbitExchange is the exchange courier publishes to when its RabbitMQ URL names none
// (rabbitmq.DefaultExchange): a durable topic exchange, routing key = topic.
const DefaultRabbitExchange = rabbitmq.DefaultExchange

// RabbitConsumer reads one reward's messages from RabbitMQ: a durable quorum queue bound to
// courier's exchange by the reward's topic. Like the JetStream consumer, it acknowledges a
// message only after the handler's transaction committed; a failure is requeued after the
// handler's NakDelay, an invalid payload is rejected (dropped, or dead-lettered if the queue
// has a dead-letter exchange). It reconnects by itself when the connection drops.
type RabbitConsumer struct {
	// URL is the RabbitMQ URL, written as courier's broker URL for the same server:
	// amqp[s]://user:pass@host:port/vhost[?exchange=name] (exchange default "courier").
	URL     string
	Queue   string // default RabbitQueue(Handler.Reward)
	Handler *Handler
	// Subscribed, if set, is called each time the consumer is (re)subscribed to its queue.
	Subscribed func()
}

// RabbitQueue is a reward's queue name.
func RabbitQueue(r Reward) string { return "registration." + r.Consumer }

// rabbitTarget splits courier's form of a RabbitMQ URL into the URL amqp091 dials (without
// courier's own options) and the exchange.
func rabbitTarget(raw string) (dial, exchange string, err error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") {
		return "", "", fmt.Errorf("RabbitMQ URL %s: want amqp://user:pass@host:5672/[?exchange=name]", mq.RedactURL(raw))
	}
	q := u.Query()
	exchange = DefaultRabbitExchange
	if q.Has("exchange") {
		exchange = q.Get("exchange")
	}
	q.Del("exchange")
	q.Del("declare")
	u.RawQuery = q.Encode()
	return u.String(), exchange, nil
}

// SetupRabbit declares the exchange as courier does (a durable topic exchange, if missing),
// the reward's durable quorum queue, and binds it by the reward's topic. Idempotent.
func SetupRabbit(conn *amqp.Connection, exchange, queue string, r Reward) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if exchange == "" {
		return errors.New("the default exchange cannot be bound: name an exchange")
	}
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %q: %w", exchange, err)
	}
	// A quorum queue: replicated, on disk, and it counts deliveries (x-delivery-count).
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return fmt.Errorf("declare queue %q: %w", queue, err)
	}
	if err := ch.QueueBind(queue, r.Topic, exchange, false, nil); err != nil {
		return fmt.Errorf("bind queue %q to %q by %q: %w", queue, exchange, r.Topic, err)
	}
	return nil
}

// Run consumes until ctx ends, reconnecting (after 0.5 s, doubling to 5 s) whenever the
// connection cannot be opened or drops. A message in hand finishes even when ctx ends.
func (c *RabbitConsumer) Run(ctx context.Context) error {
	dial, exchange, err := rabbitTarget(c.URL)
	if err != nil {
		return err
	}
	queue := c.Queue
	if queue == "" {
		queue = RabbitQueue(c.Handler.Reward)
	}
	log := c.Handler.logger().With("consumer", c.Handler.Reward.Consumer, "queue", queue)
	wait := 500 * time.Millisecond
	for {
		subscribed, err := c.session(ctx, dial, exchange, queue)
		if ctx.Err() != nil {
			return nil
		}
		if subscribed {
			wait = 500 * time.Millisecond
		}
		log.Warn("RabbitMQ connection lost; reconnecting", "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// session is one connection: it sets up, subscribes, and handles deliveries until ctx ends or
// the connection drops. subscribed says whether it got that far.
func (c *RabbitConsumer) session(ctx context.Context, dial, exchange, queue string) (subscribed bool, err error) {
	cfg := amqp.Config{Dial: amqp.DefaultDial(5 * time.Second), Properties: amqp.NewConnectionProperties()}
	cfg.Properties.SetClientConnectionName("registration-" + c.Handler.Reward.Consumer)
	conn, err := amqp.DialConfig(dial, cfg)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if err := SetupRabbit(conn, exchange, queue, c.Handler.Reward); err != nil {
		return false, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return false, err
	}
	if err := ch.Qos(1, 0, false); err != nil { // one message at a time, as the JetStream side
		return false, err
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("consume %q: %w", queue, err)
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	c.Handler.logger().Info("consumer started", "consumer", c.Handler.Reward.Consumer, "queue", queue,
		"exchange", exchange, "binding", c.Handler.Reward.Topic, "rabbitmq", mq.RedactURL(c.URL))
	if c.Subscribed != nil {
		c.Subscribed()
	}
	base := context.WithoutCancel(ctx) // a message in hand finishes: no commit turns into a rollback halfway
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case e := <-closed:
			if e == nil {
				return true, errors.New("connection closed")
			}
			return true, e
		case d, ok := <-deliveries:
			if !ok {
				return true, errors.New("the delivery channel closed")
			}
			mctx, cancel := context.WithTimeout(base, handleTimeout)
			c.Handler.HandleAMQP(mctx, d)
			cancel()
		}
	}
}

// AMQPMessageID is a RabbitMQ message's idempotency key: the Courier-Message-Id header courier
// sets, falling back to the message_id property (courier sets both).
func AMQPMessageID(d amqp.Delivery) string {
	if id, ok := d.Headers[mq.HeaderMessageID].(string); ok && id != "" {
		return id
	}
	return d.MessageId
}

// amqpAttempt is the delivery count: a quorum queue's x-delivery-count (absent on the first
// delivery) plus one; for other queues, 2 for any redelivery.
func amqpAttempt(d amqp.Delivery) uint64 {
	switch n := d.Headers["x-delivery-count"].(type) {
	case int64:
		return uint64(n) + 1
	case int32:
		return uint64(n) + 1
	case int16:
		return uint64(n) + 1
	case int8:
		return uint64(n) + 1
	case int:
		return uint64(n) + 1
	}
	if d.Redelivered {
		return 2
	}
	return 1
}

// HandleAMQP processes one RabbitMQ message and then acknowledges it, requeues it after
// NakDelay, or rejects it, by the outcome.
func (h *Handler) HandleAMQP(ctx context.Context, msg amqp.Delivery) Delivery {
	d := h.process(ctx, Incoming{MessageID: AMQPMessageID(msg), Data: msg.Body, Attempt: amqpAttempt(msg)})
	log := h.logger().With("consumer", d.Consumer, "message_id", d.MessageID)
	var err error
	switch d.Outcome {
	case Rejected:
		err = msg.Reject(false)
	case Retry:
		// RabbitMQ has no delayed requeue: wait here (the queue's prefetch of one holds the
		// next message back meanwhile), then requeue.
		select {
		case <-ctx.Done():
		case <-time.After(h.nakDelay()):
		}
		err = msg.Nack(false, true)
	default:
		// Committed: acknowledge. If the ack is lost the message comes back and is a Duplicate.
		err = msg.Ack(false)
	}
	if err != nil {
		// The connection dropped first: the broker redelivers the message, and a committed one
		// is then skipped as a Duplicate.
		log.Warn("settling the message failed; the broker redelivers it", "outcome", d.Outcome, "err", err)
	}
	h.observe(d)
	return d
}
