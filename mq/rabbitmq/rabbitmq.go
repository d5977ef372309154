package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/mq"
)

// RabbitMQ settings.
const (
	// DefaultExchange is the exchange messages are published to when the URL names
	// none: a durable topic exchange, declared if missing (unless declare=0).
	DefaultExchange = "courier"
	// rabbitMaxInFlight bounds the publishes waiting for a confirm on the one channel; it also
	// sizes the buffer that holds returned (unroutable) messages until their publisher looks.
	rabbitMaxInFlight = 256
)

var errRabbitClosed = errors.New("mq: the RabbitMQ publisher is closed")

// Publisher publishes to RabbitMQ (AMQP 0-9-1) with publisher confirms: Publish returns nil once
// the broker has confirmed the message, which for a persistent message routed to durable (or
// quorum) queues means they have written it to disk. Every message goes to one exchange, named
// in the URL, with the topic as routing key: queues bound to the exchange by a routing-key
// pattern ("orders.*", "orders.#") receive the topics they match. Messages are published with
// mandatory set, so one that no queue receives comes back and is mq.ErrUnknownTopic, and in
// persistent delivery mode. The message id is the AMQP message_id and the Courier-Message-Id
// header; the key is the Courier-Key header; producer headers are AMQP headers.
//
// One connection and one confirm-mode channel carry all publishes; they are opened on first
// use and opened again after they drop, so an unreachable broker is a retryable error for as
// long as it lasts and publishing recovers by itself once it is back.
type Publisher struct {
	cfg     config
	name    string
	dialing chan struct{} // a one-slot lock held while connecting, so waiting honours ctx
	slots   chan struct{} // one per publish waiting for its confirm

	mu     sync.Mutex
	sess   *rabbitSession
	closed bool
}

// config is what an amqp:// or amqps:// URL says.
type config struct {
	url      string // for amqp091: the URL without courier's options
	addr     string // the URL without secrets, for errors
	exchange string
	declare  bool
}

// Dial returns a RabbitMQ publisher for a URL of the form
//
//	amqp[s]://user:password@host[:port][/vhost][?option=value&...]
//
// with courier's options exchange (default "courier"; an empty value, "exchange=", publishes
// to the default exchange, where the routing key is a queue name) and declare (default 1:
// create the exchange as a durable topic exchange if it is missing; 0 leaves that to the
// operator, and a missing exchange makes every publish mq.ErrUnknownTopic), and amqp091's own
// heartbeat, connection_timeout, channel_max, auth_mechanism, and for amqps:// cacertfile,
// certfile, keyfile and server_name_indication. It connects lazily: an unreachable broker makes
// Publish and Ping fail, not Dial. clientName is the connection_name the broker shows.
func Dial(rawURL, clientName string) (*Publisher, error) {
	cfg, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return &Publisher{
		cfg:     cfg,
		name:    clientName,
		dialing: make(chan struct{}, 1),
		slots:   make(chan struct{}, rabbitMaxInFlight),
	}, nil
}

// Exchange is the exchange this publisher publishes to ("" is the default exchange).
func (r *Publisher) Exchange() string { return r.cfg.exchange }

// Publish publishes m to the exchange with m.Topic as routing key and waits for the broker's
// confirm.
func (r *Publisher) Publish(ctx context.Context, m mq.Message) error {
	if err := courier.CheckMessage(m.Topic, m.Key, m.Headers); err != nil {
		return fmt.Errorf("%w: %v", mq.ErrRefused, err)
	}
	if r.isClosed() {
		return errRabbitClosed
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, mq.DefaultPublishTimeout)
		defer cancel()
	}
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("mq: publish to RabbitMQ at %s: too many publishes waiting for confirms (retrying): %w", r.cfg.addr, ctx.Err())
	}
	defer func() { <-r.slots }()
	s, err := r.session(ctx)
	if err != nil {
		return err
	}
	return r.publish(ctx, s, m)
}

func (r *Publisher) publish(ctx context.Context, s *rabbitSession, m mq.Message) error {
	headers := make(amqp.Table, len(m.Headers)+2)
	for k, v := range m.Headers {
		headers[k] = v
	}
	headers[mq.HeaderMessageID] = m.ID
	if m.Key != "" {
		headers[mq.HeaderKey] = m.Key
	}
	p := &rabbitPending{match: m.ID + "\x00" + m.Topic}

	// Registering and publishing under one lock keeps the pending list of a message id in
	// publish order, the order in which the broker returns unroutable messages.
	s.mu.Lock()
	s.drainLocked()
	s.pending[p.match] = append(s.pending[p.match], p)
	dc, err := s.ch.PublishWithDeferredConfirmWithContext(ctx, r.cfg.exchange, m.Topic, true, false, amqp.Publishing{
		Headers:      headers,
		DeliveryMode: amqp.Persistent,
		MessageId:    m.ID,
		Body:         m.Payload,
	})
	if err != nil {
		s.removeLocked(p)
		s.mu.Unlock()
		r.drop(s)
		return fmt.Errorf("mq: publish to RabbitMQ at %s: %w (retrying)", r.cfg.addr, err)
	}
	s.mu.Unlock()

	select {
	case <-dc.Done():
	case <-ctx.Done():
		s.settle(p)
		return fmt.Errorf("mq: publish %q to RabbitMQ at %s: not confirmed in time (retrying): %w", m.Topic, r.cfg.addr, ctx.Err())
	}
	// The broker sends basic.return before the basic.ack of the same message, and the library
	// delivers the return into s.returns before it handles the ack: settle sees it.
	returned := s.settle(p)
	if dc.Acked() {
		if returned != nil {
			return fmt.Errorf("%w %q: no queue bound to exchange %q takes routing key %q (%d %s)",
				mq.ErrUnknownTopic, m.Topic, r.cfg.exchange, m.Topic, returned.ReplyCode, returned.ReplyText)
		}
		return nil
	}
	if cerr := s.closeError(); cerr != nil || !s.alive() {
		r.drop(s)
		if cerr != nil && cerr.Code == amqp.NotFound {
			return fmt.Errorf("%w %q: RabbitMQ at %s: %s (create the exchange, or let courier declare it)", mq.ErrUnknownTopic, m.Topic, r.cfg.addr, cerr.Reason)
		}
		if cerr != nil {
			return fmt.Errorf("mq: publish %q to RabbitMQ at %s: the channel closed before the confirm (retrying): %w", m.Topic, r.cfg.addr, cerr)
		}
		if r.isClosed() {
			return errRabbitClosed
		}
		return fmt.Errorf("mq: publish %q to RabbitMQ at %s: the connection closed before the confirm (retrying)", m.Topic, r.cfg.addr)
	}
	return fmt.Errorf("mq: publish %q to RabbitMQ at %s: the broker refused the message (basic.nack; retrying)", m.Topic, r.cfg.addr)
}

// Ping checks that the broker answers and that the exchange exists.
func (r *Publisher) Ping(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, mq.DefaultPublishTimeout)
		defer cancel()
	}
	s, err := r.session(ctx)
	if err != nil {
		return err
	}
	if b := s.blocked.Load(); b != nil {
		return fmt.Errorf("mq: RabbitMQ at %s blocks publishers: %s", r.cfg.addr, *b)
	}
	// amqp091 calls take no context; they end when the connection does (heartbeats).
	done := make(chan error, 1)
	go func() {
		ch, err := s.conn.Channel()
		if err != nil {
			done <- err
			return
		}
		defer ch.Close()
		if r.cfg.exchange != "" {
			if err := ch.ExchangeDeclarePassive(r.cfg.exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
				done <- fmt.Errorf("exchange %q: %w", r.cfg.exchange, err)
				return
			}
		}
		done <- nil
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("mq: RabbitMQ at %s: %w", r.cfg.addr, err)
	}
	return nil
}

// Close waits up to 5 seconds for publishes in flight, then closes the connection.
func (r *Publisher) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	wait := time.NewTimer(5 * time.Second)
	defer wait.Stop()
drain:
	for range cap(r.slots) {
		select {
		case r.slots <- struct{}{}:
		case <-wait.C:
			break drain
		}
	}
	r.mu.Lock()
	s := r.sess
	r.sess = nil
	r.mu.Unlock()
	if s != nil {
		s.close()
	}
	return nil
}

func (r *Publisher) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// session returns the open session, connecting if there is none.
func (r *Publisher) session(ctx context.Context) (*rabbitSession, error) {
	r.mu.Lock()
	s, closed := r.sess, r.closed
	r.mu.Unlock()
	if closed {
		return nil, errRabbitClosed
	}
	if s != nil && s.alive() {
		return s, nil
	}
	select {
	case r.dialing <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("mq: RabbitMQ at %s: still connecting (retrying): %w", r.cfg.addr, ctx.Err())
	}
	defer func() { <-r.dialing }()
	r.mu.Lock()
	s, closed = r.sess, r.closed
	r.mu.Unlock()
	if closed {
		return nil, errRabbitClosed
	}
	if s != nil && s.alive() { // another caller connected meanwhile
		return s, nil
	}
	if s != nil {
		r.drop(s)
	}
	s, err := r.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("mq: RabbitMQ at %s unreachable (retrying): %w", r.cfg.addr, err)
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		s.close()
		return nil, errRabbitClosed
	}
	r.sess = s
	r.mu.Unlock()
	return s, nil
}

// drop forgets s (if it is still the current session) and closes it.
func (r *Publisher) drop(s *rabbitSession) {
	r.mu.Lock()
	if r.sess == s {
		r.sess = nil
	}
	r.mu.Unlock()
	s.close()
}

func (r *Publisher) connect(ctx context.Context) (*rabbitSession, error) {
	deadline, _ := ctx.Deadline()
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(r.name)
	conn, err := amqp.DialConfig(r.cfg.url, amqp.Config{
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Bounds the TLS and AMQP handshakes; amqp091 clears it once the connection is open.
			if err := c.SetDeadline(deadline); err != nil {
				_ = c.Close()
				return nil, err
			}
			return c, nil
		},
	})
	if err != nil {
		return nil, err
	}
	s := &rabbitSession{conn: conn, pending: make(map[string][]*rabbitPending)}
	fail := func(err error) (*rabbitSession, error) {
		s.close()
		return nil, err
	}
	if r.cfg.exchange != "" && r.cfg.declare {
		if err := declareExchange(conn, r.cfg.exchange); err != nil {
			return fail(err)
		}
	}
	if s.ch, err = conn.Channel(); err != nil {
		return fail(err)
	}
	if err := s.ch.Confirm(false); err != nil {
		return fail(err)
	}
	// Both are filled by the library's reader: returns must have room for every publish in
	// flight (plus ones whose publisher gave up), closes for the one error it sends.
	s.returns = s.ch.NotifyReturn(make(chan amqp.Return, 2*rabbitMaxInFlight))
	s.closes = s.ch.NotifyClose(make(chan *amqp.Error, 1))
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 1))
	go func() { // ends when the connection closes, which closes blocks
		for b := range blocks {
			if b.Active {
				reason := b.Reason
				s.blocked.Store(&reason)
			} else {
				s.blocked.Store(nil)
			}
		}
	}()
	return s, nil
}

// declareExchange creates name as a durable topic exchange unless it exists (with whatever
// type its operator gave it).
func declareExchange(conn *amqp.Connection, name string) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	err = ch.ExchangeDeclarePassive(name, amqp.ExchangeTopic, true, false, false, false, nil)
	var aerr *amqp.Error
	if err == nil || !errors.As(err, &aerr) || aerr.Code != amqp.NotFound {
		_ = ch.Close()
		return err
	}
	// The failed passive declare closed that channel.
	if ch, err = conn.Channel(); err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(name, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %q: %w", name, err)
	}
	return nil
}

// rabbitSession is one connection and its confirm-mode channel.
type rabbitSession struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
	blocked atomic.Pointer[string] // the broker's reason while it blocks publishers

	mu       sync.Mutex
	pending  map[string][]*rabbitPending // by message id and routing key, in publish order
	closeErr *amqp.Error
}

// rabbitPending is one publish waiting for its confirm.
type rabbitPending struct {
	match    string
	returned *amqp.Return
}

func (s *rabbitSession) alive() bool {
	return !s.conn.IsClosed() && s.ch != nil && !s.ch.IsClosed()
}

// drainLocked hands every returned message to the oldest pending publish it matches; returns
// of publishes nobody waits for any more are dropped.
func (s *rabbitSession) drainLocked() {
	for {
		select {
		case ret, ok := <-s.returns:
			if !ok {
				return
			}
			for _, p := range s.pending[ret.MessageId+"\x00"+ret.RoutingKey] {
				if p.returned == nil {
					p.returned = &ret
					break
				}
			}
		default:
			return
		}
	}
}

func (s *rabbitSession) removeLocked(p *rabbitPending) {
	ps := s.pending[p.match]
	for i, q := range ps {
		if q == p {
			ps = append(ps[:i:i], ps[i+1:]...)
			break
		}
	}
	if len(ps) == 0 {
		delete(s.pending, p.match)
	} else {
		s.pending[p.match] = ps
	}
}

// settle collects the returns that have arrived, forgets p and tells whether it came back.
func (s *rabbitSession) settle(p *rabbitPending) *amqp.Return {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drainLocked()
	s.removeLocked(p)
	return p.returned
}

// closeError is the error the broker closed the channel with, if it did.
func (s *rabbitSession) closeError() *amqp.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeErr == nil {
		select {
		case err := <-s.closes:
			s.closeErr = err
		default:
		}
	}
	return s.closeErr
}

func (s *rabbitSession) close() {
	_ = s.conn.CloseDeadline(time.Now().Add(5 * time.Second))
}

func parseURL(raw string) (config, error) {
	bad := func(format string, args ...any) (config, error) {
		return config{}, fmt.Errorf("mq: RabbitMQ URL %s: %s", mq.RedactURL(raw), fmt.Sprintf(format, args...))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("%v", errors.Unwrap(err))
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return bad("want amqp:// or amqps://")
	}
	cfg := config{addr: mq.RedactURL(raw), exchange: DefaultExchange, declare: true}
	q := u.Query()
	for name, vs := range q {
		v := vs[len(vs)-1]
		switch name {
		case "exchange":
			cfg.exchange = v
		case "declare":
			if cfg.declare, err = strconv.ParseBool(v); err != nil {
				return bad("declare=%q is not a boolean", v)
			}
		case "heartbeat", "connection_timeout", "channel_max", "auth_mechanism",
			"cacertfile", "certfile", "keyfile", "server_name_indication":
		default:
			return bad("unknown option %q (known: exchange, declare, heartbeat, connection_timeout, channel_max, auth_mechanism, cacertfile, certfile, keyfile, server_name_indication)", name)
		}
	}
	q.Del("exchange")
	q.Del("declare")
	u.RawQuery = q.Encode()
	cfg.url = u.String()
	if _, err := amqp.ParseURI(cfg.url); err != nil {
		return bad("%v", err)
	}
	return cfg, nil
}

// CheckURL reports whether Dial would accept rawURL, without connecting.
func CheckURL(rawURL string) error {
	_, err := parseURL(rawURL)
	return err
}
