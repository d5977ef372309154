package mq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/courier-oss/courier"
)

// Router is a Publisher over several named brokers: each topic goes to the broker of the first
// route whose pattern matches it, or to the default broker when none does. Each broker has its
// own bound on publishes in flight in this process and its own health, so a broker that is down
// or hangs holds at most MaxInFlight of the callers' goroutines (activity slots) and fails the
// rest at once with a retryable error: records bound for other brokers never wait behind it.
type Router struct {
	brokers []*routedBroker // in configuration order
	byName  map[string]*routedBroker
	routes  []compiledRoute
	def     *routedBroker // nil: a topic no route matches is unroutable
	obs     RouterObserver
	log     *slog.Logger
}

// Broker is one named message-queue cluster.
type Broker struct {
	Name      string    // courier's name rule (courier.ValidName): "points", "coupons"
	Addr      string    // where it is, for logs; must hold no secret (a redacted URL)
	Publisher Publisher // the adapter
}

// Route sends the topics its Pattern matches to the broker named Broker.
type Route struct {
	Pattern string // NATS-style: "points.>", "coupons.*", "orders.created"
	Broker  string
}

// RouterConfig configures a Router. Zero fields take the documented defaults.
type RouterConfig struct {
	Brokers []Broker // at least one; names are unique
	Routes  []Route  // tried in order; the first match wins
	// Default names the broker for topics no route matches; "" means the first broker, and
	// NoDefaultBroker means none: such a topic is unroutable (ErrNoRoute, a permanent error).
	Default string
	// MaxInFlight bounds one broker's publishes in flight in this process; a publish past it
	// fails at once with ErrBrokerBusy (retryable). Default DefaultMaxInFlight.
	MaxInFlight int
	Observer    RouterObserver // told of every publish and health change; nil tells no one
	Logger      *slog.Logger   // broker up/down transitions; nil: slog.Default()
}

// NoDefaultBroker as RouterConfig.Default makes every topic that no route matches unroutable.
const NoDefaultBroker = "none"

// DefaultMaxInFlight is a broker's default bound on publishes in flight in one process: far
// above what a healthy broker needs (an acknowledgement takes milliseconds), and well below the
// worker's default of 200 outbox activity slots, so a hanging broker leaves most of them free.
const DefaultMaxInFlight = 64

// RouterObserver is told what the Router does (the metrics implement it).
type RouterObserver interface {
	// Published reports one publish to broker that took d and ended with err (nil: acked).
	Published(broker string, d time.Duration, err error)
	// InFlight reports broker's publishes in flight after a change.
	InFlight(broker string, n int)
	// BrokerUp reports the outcome of a health check of broker.
	BrokerUp(broker string, up bool)
	// Unroutable reports a publish no broker routes.
	Unroutable()
}

// ErrNoRoute reports a topic that no route matches when there is no default broker. It is
// permanent (it wraps ErrUnknownTopic) until the routes change.
var ErrNoRoute error = permanent{msg: "mq: no broker routes topic"}

// ErrBrokerDown reports a publish refused because the broker's last health check failed; it
// is retryable.
var ErrBrokerDown = errors.New("mq: broker is down")

// ErrBrokerBusy reports a publish refused because the broker already has MaxInFlight
// publishes in flight in this process (it is slow or hanging); it is retryable.
var ErrBrokerBusy = errors.New("mq: broker is busy")

type permanent struct{ msg string }

func (p permanent) Error() string        { return p.msg }
func (p permanent) Is(target error) bool { return target == ErrUnknownTopic }

type routedBroker struct {
	Broker
	slots chan struct{} // one per publish in flight

	mu       sync.Mutex
	down     bool
	downAt   time.Time // when the health check that found it down ran
	lastErr  error
	inflight map[*inflightPub]struct{}
	checked  bool // a health check has finished at least once
}

type inflightPub struct{ cancel context.CancelCauseFunc }

type compiledRoute struct {
	Route
	tokens []string
	broker *routedBroker
}

// NewRouter checks cfg and builds the Router. The Router owns the brokers' publishers: Close
// closes them.
func NewRouter(cfg RouterConfig) (*Router, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("mq: at least one broker is required")
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	r := &Router{byName: map[string]*routedBroker{}, obs: cfg.Observer, log: cfg.Logger}
	if r.log == nil {
		r.log = slog.Default()
	}
	for _, b := range cfg.Brokers {
		if err := CheckBrokerName(b.Name); err != nil {
			return nil, err
		}
		if _, dup := r.byName[b.Name]; dup {
			return nil, fmt.Errorf("mq: broker %q is named twice", b.Name)
		}
		if b.Publisher == nil {
			return nil, fmt.Errorf("mq: broker %q has no publisher", b.Name)
		}
		rb := &routedBroker{Broker: b, slots: make(chan struct{}, cfg.MaxInFlight), inflight: map[*inflightPub]struct{}{}}
		r.brokers = append(r.brokers, rb)
		r.byName[b.Name] = rb
	}
	for i, rt := range cfg.Routes {
		tokens, err := ParseRoutePattern(rt.Pattern)
		if err != nil {
			return nil, fmt.Errorf("mq: route %d (%s=%s): %w", i+1, rt.Pattern, rt.Broker, err)
		}
		b, ok := r.byName[rt.Broker]
		if !ok {
			return nil, fmt.Errorf("mq: route %d (%s=%s) names broker %q, which is not configured (brokers: %s)",
				i+1, rt.Pattern, rt.Broker, rt.Broker, strings.Join(r.Names(), ", "))
		}
		r.routes = append(r.routes, compiledRoute{Route: rt, tokens: tokens, broker: b})
	}
	switch cfg.Default {
	case "":
		r.def = r.brokers[0]
	case NoDefaultBroker:
	default:
		b, ok := r.byName[cfg.Default]
		if !ok {
			return nil, fmt.Errorf("mq: default broker %q is not configured (brokers: %s, or %q for none)",
				cfg.Default, strings.Join(r.Names(), ", "), NoDefaultBroker)
		}
		r.def = b
	}
	return r, nil
}

// CheckBrokerName applies courier's name rule to a broker name; NoDefaultBroker is reserved.
func CheckBrokerName(name string) error {
	if name == NoDefaultBroker || !courier.ValidName(name) {
		return fmt.Errorf("broker name %q is reserved or breaks the name rule (1-64 of a-z, 0-9, '_', '.', '-', starting with a letter or digit)", name)
	}
	return nil
}

// ParseRoutePattern checks a route pattern and returns its tokens. A pattern is a topic whose
// tokens may also be the NATS wildcards '*' (exactly one token) and '>' (one or more tokens,
// last only): "points.>" matches points.granted and points.user.registered but not points;
// "coupons.*" matches coupons.granted only; "*.created" matches orders.created; ">" matches
// every topic.
func ParseRoutePattern(p string) ([]string, error) {
	if p == "" {
		return nil, errors.New("the pattern is empty")
	}
	tokens := strings.Split(p, ".")
	for i, tok := range tokens {
		switch {
		case tok == ">":
			if i != len(tokens)-1 {
				return nil, fmt.Errorf("pattern %q: '>' must be the last token", p)
			}
		case tok == "*":
		case tok == "":
			return nil, fmt.Errorf("pattern %q has an empty token (a leading, trailing or doubled '.')", p)
		default:
			if strings.ContainsAny(tok, "*>") {
				return nil, fmt.Errorf("pattern %q: '*' and '>' are whole tokens (\"orders.*\", not \"orders*\")", p)
			}
			if err := courier.CheckTopic("token", tok); err != nil {
				return nil, fmt.Errorf("pattern %q: token %q is not a topic token (A-Z, a-z, 0-9, '_', '-')", p, tok)
			}
		}
	}
	return tokens, nil
}

// MatchRoute reports whether a topic matches a pattern's tokens (from ParseRoutePattern).
func MatchRoute(tokens []string, topic string) bool {
	for i, pt := range tokens {
		if pt == ">" {
			return topic != "" // at least one more token
		}
		if topic == "" {
			return false
		}
		tok, rest, more := strings.Cut(topic, ".")
		if pt != "*" && pt != tok {
			return false
		}
		if !more {
			return i == len(tokens)-1
		}
		topic = rest
		if i == len(tokens)-1 {
			return false // the topic has more tokens than the pattern
		}
	}
	return false
}

// Route returns the name of the broker topic goes to, or an error wrapping ErrNoRoute.
func (r *Router) Route(topic string) (string, error) {
	b, err := r.route(topic)
	if err != nil {
		return "", err
	}
	return b.Name, nil
}

func (r *Router) route(topic string) (*routedBroker, error) {
	for _, rt := range r.routes {
		if MatchRoute(rt.tokens, topic) {
			return rt.broker, nil
		}
	}
	if r.def != nil {
		return r.def, nil
	}
	return nil, fmt.Errorf("%w %q: no route matches it and there is no default broker (routes: %s)",
		ErrNoRoute, topic, r.describeRoutes())
}

func (r *Router) describeRoutes() string {
	if len(r.routes) == 0 {
		return "none"
	}
	parts := make([]string, len(r.routes))
	for i, rt := range r.routes {
		parts[i] = rt.Pattern + "=" + rt.Broker
	}
	return strings.Join(parts, ",")
}

// Names returns the brokers' names in configuration order.
func (r *Router) Names() []string {
	out := make([]string, len(r.brokers))
	for i, b := range r.brokers {
		out[i] = b.Name
	}
	return out
}

// Default returns the default broker's name ("" when there is none).
func (r *Router) Default() string {
	if r.def == nil {
		return ""
	}
	return r.def.Name
}

// Broker returns the named broker.
func (r *Router) Broker(name string) (Broker, bool) {
	b, ok := r.byName[name]
	if !ok {
		return Broker{}, false
	}
	return b.Broker, true
}

// Publish sends m to its topic's broker. It fails at once, without touching the broker, when
// no broker routes the topic (ErrNoRoute, permanent), when the broker's last health check
// failed (ErrBrokerDown) or when it already has MaxInFlight publishes in flight here
// (ErrBrokerBusy); both are retryable.
func (r *Router) Publish(ctx context.Context, m Message) error {
	b, err := r.route(m.Topic)
	if err != nil {
		if r.obs != nil {
			r.obs.Unroutable()
		}
		return err
	}
	start := time.Now()
	err = r.publish(ctx, b, m)
	if r.obs != nil {
		r.obs.Published(b.Name, time.Since(start), err)
	}
	return err
}

func (r *Router) publish(ctx context.Context, b *routedBroker, m Message) error {
	var err error
	if serr := r.inFlight(ctx, b, func(pctx context.Context) {
		err = abandoned(ctx, pctx, b.Publisher.Publish(pctx, m))
	}); serr != nil {
		return serr
	}
	return err
}

// PublishBatch sends each message to its topic's broker and returns one error per message, in
// order (nil: acked), with the same failures as Publish. The messages for one broker go out
// together (mq.PublishAll) and take one of its in-flight slots, so a batch never holds more of
// a broker's slots than a single publish.
func (r *Router) PublishBatch(ctx context.Context, msgs []Message) []error {
	errs := make([]error, len(msgs))
	groups := map[*routedBroker][]int{}
	var order []*routedBroker
	for i, m := range msgs {
		b, err := r.route(m.Topic)
		if err != nil {
			if r.obs != nil {
				r.obs.Unroutable()
			}
			errs[i] = err
			continue
		}
		if _, seen := groups[b]; !seen {
			order = append(order, b)
		}
		groups[b] = append(groups[b], i)
	}
	var wg sync.WaitGroup
	for _, b := range order {
		idx := groups[b]
		wg.Add(1)
		go func() {
			defer wg.Done()
			group := make([]Message, len(idx))
			for j, i := range idx {
				group[j] = msgs[i]
			}
			start := time.Now()
			serr := r.inFlight(ctx, b, func(pctx context.Context) {
				for j, err := range PublishAll(pctx, b.Publisher, group) {
					errs[idx[j]] = abandoned(ctx, pctx, err)
				}
			})
			for _, i := range idx {
				if serr != nil {
					errs[i] = serr
				}
				if r.obs != nil {
					r.obs.Published(b.Name, time.Since(start), errs[i])
				}
			}
		}()
	}
	wg.Wait()
	return errs
}

// inFlight runs fn with one of b's in-flight slots, under a context that a failed health check
// cancels, so a hung publish gives its slot (and its caller's activity slot) back at once. It
// fails without running fn when b's last health check failed (ErrBrokerDown) or all its slots
// are taken (ErrBrokerBusy); both are retryable.
func (r *Router) inFlight(ctx context.Context, b *routedBroker, fn func(pctx context.Context)) error {
	if down, lastErr := b.isDown(); down {
		return fmt.Errorf("%w: %q failed its last health check (%v); retrying later", ErrBrokerDown, b.Name, lastErr)
	}
	select {
	case b.slots <- struct{}{}:
	default:
		return fmt.Errorf("%w: %q already has %d publishes in flight from this process (slow or down); retrying later",
			ErrBrokerBusy, b.Name, cap(b.slots))
	}
	defer func() { <-b.slots }()
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	p := &inflightPub{cancel: cancel}
	n := b.add(p)
	if r.obs != nil {
		r.obs.InFlight(b.Name, n)
	}
	defer func() {
		n := b.remove(p)
		if r.obs != nil {
			r.obs.InFlight(b.Name, n)
		}
	}()
	fn(pctx)
	return nil
}

// abandoned says why a publish failed when a health check cancelled it (pctx's cause), rather
// than the adapter's bare "context canceled".
func abandoned(ctx, pctx context.Context, err error) error {
	if err != nil && ctx.Err() == nil {
		if cause := context.Cause(pctx); errors.Is(cause, ErrBrokerDown) {
			return fmt.Errorf("%w (publish abandoned): %v", cause, err)
		}
	}
	return err
}

func (b *routedBroker) isDown() (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.down, b.lastErr
}

func (b *routedBroker) add(p *inflightPub) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inflight[p] = struct{}{}
	return len(b.inflight)
}

func (b *routedBroker) remove(p *inflightPub) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.inflight, p)
	return len(b.inflight)
}

// setHealth records a health check made at now; it returns whether the state changed (or this
// is the first check) and, when the broker came back, how long it was down. Going down cancels
// the publishes in flight.
func (b *routedBroker) setHealth(err error, now time.Time) (changed bool, outage time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	wasDown := b.down
	b.down, b.lastErr = err != nil, err
	switch {
	case b.down && !wasDown:
		b.downAt = now
		cause := fmt.Errorf("%w: %q failed a health check (%v)", ErrBrokerDown, b.Name, err)
		for p := range b.inflight {
			p.cancel(cause)
		}
	case wasDown && !b.down:
		outage = now.Sub(b.downAt)
	}
	first := !b.checked
	b.checked = true
	return first || wasDown != b.down, outage
}

// Ping checks every broker at once and joins the failures, each naming its broker.
func (r *Router) Ping(ctx context.Context) error {
	return r.eachBroker(func(p Publisher) error { return p.Ping(ctx) })
}

// eachBroker runs do on every broker's publisher at once and joins the failures, each naming
// its broker.
func (r *Router) eachBroker(do func(Publisher) error) error {
	errs := make([]error, len(r.brokers))
	var wg sync.WaitGroup
	for i, b := range r.brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := do(b.Publisher); err != nil {
				errs[i] = fmt.Errorf("broker %q: %w", b.Name, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// PingBroker checks one broker.
func (r *Router) PingBroker(ctx context.Context, name string) error {
	b, ok := r.byName[name]
	if !ok {
		return fmt.Errorf("mq: broker %q is not configured", name)
	}
	return b.Publisher.Ping(ctx)
}

// Up reports whether a broker passed its last health check (true before the first).
func (r *Router) Up(name string) bool {
	b, ok := r.byName[name]
	if !ok {
		return false
	}
	down, _ := b.isDown()
	return !down
}

// DefaultCheckInterval is how often Watch checks each broker unless told otherwise.
const DefaultCheckInterval = 2 * time.Second

// Watch checks every broker every interval (each check bounded by timeout) until ctx ends.
// A broker that fails a check is down: its publishes in flight are cancelled and new ones fail
// at once with ErrBrokerDown until a check passes again. Without Watch a Router never marks a
// broker down.
func (r *Router) Watch(ctx context.Context, interval, timeout time.Duration) {
	if interval <= 0 {
		interval = DefaultCheckInterval
	}
	if timeout <= 0 || timeout > interval {
		timeout = interval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		r.CheckNow(ctx, timeout)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// CheckNow runs one health check of every broker at once (what Watch does every interval).
func (r *Router) CheckNow(ctx context.Context, timeout time.Duration) {
	var wg sync.WaitGroup
	for _, b := range r.brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			err := b.Publisher.Ping(cctx)
			cancel()
			if ctx.Err() != nil {
				return // shutting down: not the broker's fault
			}
			if r.obs != nil {
				r.obs.BrokerUp(b.Name, err == nil)
			}
			// One line when a broker goes down and one when it is back: a down broker is an
			// expected condition (its records wait and retry), not a stream of errors.
			if changed, outage := b.setHealth(err, time.Now()); changed {
				switch {
				case err != nil:
					r.log.Warn("broker is down: its records wait and retry, other brokers' records flow",
						"broker", b.Name, "addr", b.Addr, "error", err)
				case outage > 0:
					r.log.Info("broker is up again", "broker", b.Name, "addr", b.Addr, "outage", outage.Round(time.Millisecond).String())
				default:
					r.log.Info("broker is up", "broker", b.Name, "addr", b.Addr)
				}
			}
		}()
	}
	wg.Wait()
}

// Close closes every broker's publisher and joins their errors.
func (r *Router) Close() error {
	return r.eachBroker(Publisher.Close)
}
