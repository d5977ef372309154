package mq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-oss/courier"
)

// NATS publishes to NATS JetStream: the topic is the subject, and the message id is sent as
// Nats-Msg-Id so the stream drops duplicates inside its duplicate window (2 minutes by default).
// Streams are the operator's: a subject that no stream captures is ErrUnknownTopic.
type NATS struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// DialNATS connects to a NATS server and keeps reconnecting for as long as the process runs.
func DialNATS(url string, name string) (*NATS, error) {
	nc, err := nats.Connect(url,
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500*time.Millisecond),
		nats.Timeout(5*time.Second),
	)
	if err != nil {
		return nil, fmt.Errorf("mq: connect to NATS at %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &NATS{nc: nc, js: js}, nil
}

// Conn exposes the connection (for tests and examples that also consume).
func (n *NATS) Conn() *nats.Conn { return n.nc }

// Publish publishes m and waits for the stream's acknowledgement.
func (n *NATS) Publish(ctx context.Context, m Message) error {
	if err := courier.CheckMessage(m.Topic, m.Key, m.Headers); err != nil {
		return fmt.Errorf("%w: %v", ErrRefused, err)
	}
	msg := nats.NewMsg(m.Topic)
	msg.Data = m.Payload
	for k, v := range m.Headers {
		msg.Header.Set(k, v)
	}
	msg.Header.Set(HeaderMessageID, m.ID)
	if m.Key != "" {
		msg.Header.Set(HeaderKey, m.Key)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	_, err := n.js.PublishMsg(ctx, msg, jetstream.WithMsgID(m.ID))
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		// No answer can also mean JetStream is briefly unavailable (a restart, a leader
		// election): only a confirmed missing stream is permanent.
		if _, lerr := n.js.StreamNameBySubject(ctx, m.Topic); errors.Is(lerr, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("%w %q: no JetStream stream captures this subject", ErrUnknownTopic, m.Topic)
		}
		return fmt.Errorf("mq: publish to %q: no stream answered (retrying): %w", m.Topic, err)
	}
	if err != nil {
		return fmt.Errorf("mq: publish to %q: %w", m.Topic, err)
	}
	return nil
}

// Ping checks the connection and JetStream answer.
func (n *NATS) Ping(ctx context.Context) error {
	if !n.nc.IsConnected() {
		return errors.New("mq: not connected to NATS")
	}
	_, err := n.js.AccountInfo(ctx)
	return err
}

// Close drains and closes the connection.
func (n *NATS) Close() error {
	return n.nc.Drain()
}
