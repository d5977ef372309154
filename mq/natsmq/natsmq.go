package natsmq

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/mq"
)

// Publisher publishes to NATS JetStream: the topic is the subject, and the message id is sent as
// Nats-Msg-Id so the stream drops duplicates inside its duplicate window (2 minutes by default).
// Streams are the operator's: a subject that no stream captures is mq.ErrUnknownTopic.
type Publisher struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	closed chan struct{} // closed by the connection's ClosedHandler
}

// Dial connects to a NATS server (rawURL may list several, comma-separated) and keeps
// reconnecting for as long as the process runs. A server that does not answer at first is an
// error. name is the connection name the server shows.
func Dial(rawURL, name string) (*Publisher, error) {
	return dial(rawURL, name, false)
}

// DialLazy is Dial that keeps trying a server that does not answer at first instead of
// failing: Publish and Ping fail until it answers.
func DialLazy(rawURL, name string) (*Publisher, error) {
	return dial(rawURL, name, true)
}

func dial(rawURL, name string, lazy bool) (*Publisher, error) {
	closed := make(chan struct{})
	nc, err := nats.Connect(rawURL,
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
		nats.DrainTimeout(10*time.Second),
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500*time.Millisecond),
		nats.Timeout(5*time.Second),
		nats.RetryOnFailedConnect(lazy),
	)
	if err != nil {
		return nil, fmt.Errorf("mq: connect to NATS at %s: %w", mq.RedactURL(rawURL), err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(asyncMaxPending))
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &Publisher{nc: nc, js: js, closed: closed}, nil
}

// asyncMaxPending bounds the asynchronous publishes awaiting acknowledgement on one
// connection (PublishBatch); a batch past it waits for room.
const asyncMaxPending = 16384

// Conn exposes the connection (for tests and examples that also consume).
func (n *Publisher) Conn() *nats.Conn { return n.nc }

// Publish publishes m and waits for the stream's acknowledgement.
func (n *Publisher) Publish(ctx context.Context, m mq.Message) error {
	msg, err := n.message(m)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, mq.DefaultPublishTimeout)
		defer cancel()
	}
	_, err = n.js.PublishMsg(ctx, msg, jetstream.WithMsgID(m.ID))
	return n.publishError(ctx, m.Topic, err)
}

// PublishBatch publishes every message asynchronously (all acknowledgements in flight at once)
// and waits for each acknowledgement, so a batch costs about one round trip to the stream
// rather than one per message. Each message's outcome is reported as Publish would.
func (n *Publisher) PublishBatch(ctx context.Context, msgs []mq.Message) []error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, mq.DefaultPublishTimeout)
		defer cancel()
	}
	errs := make([]error, len(msgs))
	acks := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		msg, err := n.message(m)
		if err != nil {
			errs[i] = err
			continue
		}
		acks[i], errs[i] = n.js.PublishMsgAsync(msg, jetstream.WithMsgID(m.ID))
		if errs[i] != nil {
			errs[i] = fmt.Errorf("mq: publish to %q: %w", m.Topic, errs[i])
		}
	}
	for i, ack := range acks {
		if ack == nil {
			continue
		}
		select {
		case <-ack.Ok():
		case err := <-ack.Err():
			errs[i] = n.publishError(ctx, msgs[i].Topic, err)
		case <-ctx.Done():
			errs[i] = fmt.Errorf("mq: publish to %q: no acknowledgement: %w", msgs[i].Topic, ctx.Err())
		}
	}
	return errs
}

// message checks m against courier's message rule and builds its NATS message.
func (n *Publisher) message(m mq.Message) (*nats.Msg, error) {
	if err := courier.CheckMessage(m.Topic, m.Key, m.Headers); err != nil {
		return nil, fmt.Errorf("%w: %v", mq.ErrRefused, err)
	}
	if n.nc.IsClosed() || n.nc.IsDraining() {
		// A publish sent while draining would still be stored, with no one left to read the ack.
		return nil, errors.New("mq: the NATS publisher is closed")
	}
	msg := nats.NewMsg(m.Topic)
	msg.Data = m.Payload
	for k, v := range m.Headers {
		msg.Header.Set(k, v)
	}
	msg.Header.Set(mq.HeaderMessageID, m.ID)
	if m.Key != "" {
		msg.Header.Set(mq.HeaderKey, m.Key)
	}
	return msg, nil
}

// publishError turns a publish's error into courier's: a subject no stream captures is
// mq.ErrUnknownTopic (permanent); anything else is retryable.
func (n *Publisher) publishError(ctx context.Context, topic string, err error) error {
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		// No answer can also mean JetStream is briefly unavailable (a restart, a leader
		// election): only a confirmed missing stream is permanent.
		if _, lerr := n.js.StreamNameBySubject(ctx, topic); errors.Is(lerr, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("%w %q: no JetStream stream captures this subject", mq.ErrUnknownTopic, topic)
		}
		return fmt.Errorf("mq: publish to %q: no stream answered (retrying): %w", topic, err)
	}
	if err != nil {
		return fmt.Errorf("mq: publish to %q: %w", topic, err)
	}
	return nil
}

// Ping checks the connection and JetStream answer.
func (n *Publisher) Ping(ctx context.Context) error {
	if !n.nc.IsConnected() {
		return errors.New("mq: not connected to NATS")
	}
	_, err := n.js.AccountInfo(ctx)
	return err
}

// Close drains the connection (publishes in flight get their acks) and waits until it is
// closed.
func (n *Publisher) Close() error {
	switch err := n.nc.Drain(); {
	case errors.Is(err, nats.ErrConnectionClosed):
		return nil
	case err != nil && !errors.Is(err, nats.ErrConnectionReconnecting): // reconnecting: closed at once
		return err
	}
	<-n.closed // bounded by the drain timeout
	return nil
}

// CheckURL reports whether Dial would accept rawURL, without connecting: one nats:// URL or a
// comma-separated list of them, each with a host.
func CheckURL(rawURL string) error {
	for _, one := range strings.Split(rawURL, ",") { // nats.Connect takes a list of servers
		if u, err := url.Parse(strings.TrimSpace(one)); err != nil || u.Host == "" {
			return fmt.Errorf("mq: NATS URL %s: want nats://host:port[,nats://host:port...]", mq.RedactURL(rawURL))
		}
	}
	return nil
}
