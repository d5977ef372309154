package mq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/mq"
)

// fakeBroker stands in for a broker: it records what it acknowledges, and can be made to hang
// (a publish blocks until its context ends) or to fail its health check.
type fakeBroker struct {
	mu      sync.Mutex
	got     []mq.Message
	hang    bool
	pingErr error
	closed  bool
	entered chan string // receives each hanging publish's message id once it blocks
}

func newFake() *fakeBroker { return &fakeBroker{entered: make(chan string, 100)} }

func (f *fakeBroker) Publish(ctx context.Context, m mq.Message) error {
	f.mu.Lock()
	hang := f.hang
	f.mu.Unlock()
	if hang {
		f.entered <- m.ID
		<-ctx.Done()
		return ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, m)
	return nil
}

func (f *fakeBroker) Ping(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pingErr
}

func (f *fakeBroker) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

func (f *fakeBroker) set(hang bool, pingErr error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hang, f.pingErr = hang, pingErr
}

func (f *fakeBroker) ids() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, m := range f.got {
		out = append(out, m.ID)
	}
	return out
}

func TestParseRoutePattern(t *testing.T) {
	for _, p := range []string{">", "*", "points.>", "coupons.*", "*.created", "a.*.c.>", "orders.created", "a-b_c.D9"} {
		_, err := mq.ParseRoutePattern(p)
		require.NoError(t, err, p)
	}
	for p, want := range map[string]string{
		"":           "empty",
		"points.":    "empty token",
		".points":    "empty token",
		"a..b":       "empty token",
		">.a":        "last token",
		"a.>.b":      "last token",
		"orders*":    "whole tokens",
		"orders.a>":  "whole tokens",
		"$JS.>":      "not a topic token",
		"a b.c":      "not a topic token",
		"points.#":   "not a topic token",
		"points/x.y": "not a topic token",
	} {
		_, err := mq.ParseRoutePattern(p)
		require.ErrorContains(t, err, want, "%q", p)
	}
}

func TestMatchRoute(t *testing.T) {
	for _, c := range []struct {
		pattern, topic string
		match          bool
	}{
		{">", "a", true},
		{">", "a.b.c", true},
		{"*", "a", true},
		{"*", "a.b", false},
		{"points.>", "points.granted", true},
		{"points.>", "points.user.registered", true},
		{"points.>", "points", false},
		{"points.>", "pointsx.granted", false},
		{"coupons.*", "coupons.granted", true},
		{"coupons.*", "coupons.user.registered", false},
		{"coupons.*", "coupons", false},
		{"*.created", "orders.created", true},
		{"*.created", "orders.created.v2", false},
		{"*.created", "created", false},
		{"a.*.c.>", "a.b.c.d", true},
		{"a.*.c.>", "a.b.c", false},
		{"orders.created", "orders.created", true},
		{"orders.created", "orders.created.x", false},
		{"orders.created", "orders", false},
		{"orders.created", "Orders.created", false},
	} {
		tokens, err := mq.ParseRoutePattern(c.pattern)
		require.NoError(t, err)
		require.Equal(t, c.match, mq.MatchRoute(tokens, c.topic), "%q ~ %q", c.pattern, c.topic)
	}
}

func newRouter(t *testing.T, cfg mq.RouterConfig) *mq.Router {
	t.Helper()
	r, err := mq.NewRouter(cfg)
	require.NoError(t, err)
	return r
}

// First match wins; a topic no route matches goes to the default broker, which is the first
// broker unless named.
func TestRouterRoutesFirstMatchThenDefault(t *testing.T) {
	points, coupons, main := newFake(), newFake(), newFake()
	brokers := []mq.Broker{{Name: "main", Publisher: main}, {Name: "points", Publisher: points}, {Name: "coupons", Publisher: coupons}}
	routes := []mq.Route{
		{Pattern: "points.special.*", Broker: "coupons"}, // before the broader route: wins
		{Pattern: "points.>", Broker: "points"},
		{Pattern: "coupons.*", Broker: "coupons"},
	}
	r := newRouter(t, mq.RouterConfig{Brokers: brokers, Routes: routes})
	require.Equal(t, "main", r.Default())
	for topic, want := range map[string]string{
		"points.granted":          "points",
		"points.user.registered":  "points",
		"points.special.x":        "coupons",
		"coupons.granted":         "coupons",
		"coupons.user.registered": "main", // '*' is one token
		"orders.created":          "main",
		"points":                  "main",
	} {
		got, err := r.Route(topic)
		require.NoError(t, err)
		require.Equal(t, want, got, topic)
		require.NoError(t, r.Publish(t.Context(), mq.Message{ID: topic, Topic: topic}))
	}
	require.ElementsMatch(t, []string{"points.granted", "points.user.registered"}, points.ids())
	require.ElementsMatch(t, []string{"points.special.x", "coupons.granted"}, coupons.ids())
	require.ElementsMatch(t, []string{"coupons.user.registered", "orders.created", "points"}, main.ids())

	named := newRouter(t, mq.RouterConfig{Brokers: brokers, Routes: routes, Default: "coupons"})
	got, err := named.Route("orders.created")
	require.NoError(t, err)
	require.Equal(t, "coupons", got)
}

// Without a default broker a topic no route matches is a permanent error that says so; the
// broker is never called.
func TestRouterUnroutableTopicIsPermanent(t *testing.T) {
	points := newFake()
	obs := &countingObserver{}
	r := newRouter(t, mq.RouterConfig{
		Brokers:  []mq.Broker{{Name: "points", Publisher: points}},
		Routes:   []mq.Route{{Pattern: "points.>", Broker: "points"}},
		Default:  mq.NoDefaultBroker,
		Observer: obs,
	})
	require.Empty(t, r.Default())
	err := r.Publish(t.Context(), mq.Message{ID: "1", Topic: "coupons.granted"})
	require.ErrorIs(t, err, mq.ErrNoRoute)
	require.ErrorIs(t, err, mq.ErrUnknownTopic, "the outbox treats it as permanent: the record goes dead")
	require.EqualError(t, err, `mq: no broker routes topic "coupons.granted": no route matches it and there is no default broker (routes: points.>=points)`)
	require.Empty(t, points.ids())
	require.Equal(t, 1, obs.count("unroutable"))
}

func TestNewRouterRefusesBadConfig(t *testing.T) {
	a := mq.Broker{Name: "a", Publisher: newFake()}
	for want, cfg := range map[string]mq.RouterConfig{
		"at least one broker":         {},
		"named twice":                 {Brokers: []mq.Broker{a, a}},
		"has no publisher":            {Brokers: []mq.Broker{{Name: "b"}}},
		"breaks the name rule":        {Brokers: []mq.Broker{{Name: "Bad Name", Publisher: newFake()}}},
		`"none" is reserved`:          {Brokers: []mq.Broker{{Name: "none", Publisher: newFake()}}},
		`names broker "b", which is`:  {Brokers: []mq.Broker{a}, Routes: []mq.Route{{Pattern: "x.>", Broker: "b"}}},
		`route 1 (x.>.y=a)`:           {Brokers: []mq.Broker{a}, Routes: []mq.Route{{Pattern: "x.>.y", Broker: "a"}}},
		`default broker "b" is not c`: {Brokers: []mq.Broker{a}, Default: "b"},
	} {
		_, err := mq.NewRouter(cfg)
		if want == `"none" is reserved` {
			require.ErrorContains(t, err, "reserved", want)
			continue
		}
		require.ErrorContains(t, err, want)
	}
}

// A broker that hangs holds at most MaxInFlight publishes; the next ones fail at once with a
// retryable error, and a publish to another broker goes through while the hung ones are still
// blocked.
func TestRouterHangingBrokerNeverDelaysAnother(t *testing.T) {
	slow, fast := newFake(), newFake()
	slow.set(true, nil)
	obs := &countingObserver{}
	r := newRouter(t, mq.RouterConfig{
		Brokers:     []mq.Broker{{Name: "slow", Publisher: slow}, {Name: "fast", Publisher: fast}},
		Routes:      []mq.Route{{Pattern: "slow.>", Broker: "slow"}, {Pattern: "fast.>", Broker: "fast"}},
		MaxInFlight: 3,
		Observer:    obs,
	})
	ctx, cancel := context.WithCancel(t.Context())
	hung := make(chan error, 3)
	for i := range 3 {
		go func() { hung <- r.Publish(ctx, mq.Message{ID: string(rune('a' + i)), Topic: "slow.x"}) }()
	}
	for range 3 {
		<-slow.entered // all three are inside the broker, blocked
	}
	require.Equal(t, 3, obs.inFlight("slow"))

	err := r.Publish(t.Context(), mq.Message{ID: "d", Topic: "slow.x"})
	require.ErrorIs(t, err, mq.ErrBrokerBusy)
	require.NotErrorIs(t, err, mq.ErrUnknownTopic, "busy is retryable")
	require.ErrorContains(t, err, `"slow" already has 3 publishes in flight`)

	for i := range 10 {
		require.NoError(t, r.Publish(t.Context(), mq.Message{ID: string(rune('0' + i)), Topic: "fast.x"}))
	}
	require.Len(t, fast.ids(), 10)
	require.Empty(t, hung, "the hung publishes are still blocked while the other broker took ten")

	cancel()
	for range 3 {
		require.ErrorIs(t, <-hung, context.Canceled)
	}
	require.Equal(t, 0, obs.inFlight("slow"))
	slow.set(false, nil)
	require.NoError(t, r.Publish(t.Context(), mq.Message{ID: "e", Topic: "slow.x"}), "slots are given back")
	require.Equal(t, 4, obs.count("error:slow"))
	require.Equal(t, 1, obs.count("ok:slow"))
	require.Equal(t, 10, obs.count("ok:fast"))
}

// A failed health check marks the broker down: its publishes in flight are cancelled, new ones
// fail at once without reaching it, other brokers are untouched; a passing check brings it back.
func TestRouterHealthCheckFailsFastWhileDown(t *testing.T) {
	a, b := newFake(), newFake()
	obs := &countingObserver{}
	r := newRouter(t, mq.RouterConfig{
		Brokers:  []mq.Broker{{Name: "a", Publisher: a}, {Name: "b", Publisher: b}},
		Routes:   []mq.Route{{Pattern: "b.>", Broker: "b"}},
		Observer: obs,
	})
	r.CheckNow(t.Context(), time.Second)
	require.True(t, r.Up("a"))
	require.Equal(t, 1, obs.count("up:a"))

	a.set(true, nil)
	hung := make(chan error, 1)
	go func() { hung <- r.Publish(t.Context(), mq.Message{ID: "1", Topic: "a.x"}) }()
	<-a.entered
	a.set(true, errors.New("connection refused"))
	r.CheckNow(t.Context(), time.Second)
	require.False(t, r.Up("a"))
	require.True(t, r.Up("b"))
	require.Equal(t, 1, obs.count("down:a"))

	err := <-hung
	require.ErrorIs(t, err, mq.ErrBrokerDown, "the hung publish is abandoned when the check fails")
	require.ErrorContains(t, err, "connection refused")

	err = r.Publish(t.Context(), mq.Message{ID: "2", Topic: "a.x"})
	require.ErrorIs(t, err, mq.ErrBrokerDown)
	require.NotErrorIs(t, err, mq.ErrUnknownTopic)
	require.Empty(t, a.entered, "a down broker is not called")
	require.NoError(t, r.Publish(t.Context(), mq.Message{ID: "3", Topic: "b.x"}))

	require.ErrorContains(t, r.Ping(t.Context()), `broker "a": connection refused`)
	require.ErrorContains(t, r.PingBroker(t.Context(), "a"), "connection refused")
	require.NoError(t, r.PingBroker(t.Context(), "b"))

	a.set(false, nil)
	r.CheckNow(t.Context(), time.Second)
	require.True(t, r.Up("a"))
	require.NoError(t, r.Publish(t.Context(), mq.Message{ID: "4", Topic: "a.x"}))
	require.Equal(t, []string{"4"}, a.ids())
	require.Equal(t, []string{"3"}, b.ids())

	require.NoError(t, r.Close())
	require.True(t, a.closed)
	require.True(t, b.closed)
}

// Watch checks on its own until its context ends.
func TestRouterWatch(t *testing.T) {
	a := newFake()
	a.set(false, errors.New("no route to host"))
	r := newRouter(t, mq.RouterConfig{Brokers: []mq.Broker{{Name: "a", Publisher: a}}})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Watch(ctx, 10*time.Millisecond, time.Second)
	}()
	require.Eventually(t, func() bool { return !r.Up("a") }, 10*time.Second, 5*time.Millisecond)
	a.set(false, nil)
	require.Eventually(t, func() bool { return r.Up("a") }, 10*time.Second, 5*time.Millisecond)
	cancel()
	<-done
}

type countingObserver struct {
	mu       sync.Mutex
	counts   map[string]int
	inflight map[string]int
}

func (o *countingObserver) inc(k string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counts == nil {
		o.counts = map[string]int{}
	}
	o.counts[k]++
}

func (o *countingObserver) count(k string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts[k]
}

func (o *countingObserver) inFlight(b string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.inflight[b]
}

func (o *countingObserver) Published(broker string, _ time.Duration, err error) {
	if err != nil {
		o.inc("error:" + broker)
		return
	}
	o.inc("ok:" + broker)
}

func (o *countingObserver) InFlight(broker string, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.inflight == nil {
		o.inflight = map[string]int{}
	}
	o.inflight[broker] = n
}

func (o *countingObserver) BrokerUp(broker string, up bool) {
	if up {
		o.inc("up:" + broker)
		return
	}
	o.inc("down:" + broker)
}

func (o *countingObserver) Unroutable() { o.inc("unroutable") }

// A batch goes to each message's broker, one in-flight slot per broker: an unroutable message
// and a busy broker fail only their own messages, and the others are delivered.
func TestRouterPublishBatch(t *testing.T) {
	a, b, c := newFake(), newFake(), newFake()
	c.set(true, nil)
	r := newRouter(t, mq.RouterConfig{
		Brokers:     []mq.Broker{{Name: "a", Publisher: a}, {Name: "b", Publisher: b}, {Name: "c", Publisher: c}},
		Routes:      []mq.Route{{Pattern: "a.>", Broker: "a"}, {Pattern: "b.>", Broker: "b"}, {Pattern: "c.>", Broker: "c"}},
		Default:     mq.NoDefaultBroker,
		MaxInFlight: 1,
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	hung := make(chan error, 1)
	go func() { hung <- r.Publish(ctx, mq.Message{ID: "hold", Topic: "c.x"}) }()
	<-c.entered // broker c's only slot is taken

	msgs := []mq.Message{{ID: "1", Topic: "a.x"}, {ID: "2", Topic: "b.x"}, {ID: "3", Topic: "nowhere"},
		{ID: "4", Topic: "a.y"}, {ID: "5", Topic: "c.y"}, {ID: "6", Topic: "b.y"}}
	errs := r.PublishBatch(t.Context(), msgs)
	require.Len(t, errs, len(msgs))
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.ErrorIs(t, errs[2], mq.ErrUnknownTopic, "no route is permanent")
	require.NoError(t, errs[3])
	require.ErrorIs(t, errs[4], mq.ErrBrokerBusy, "the busy broker fails only its own message")
	require.NoError(t, errs[5])
	require.ElementsMatch(t, []string{"1", "4"}, a.ids())
	require.ElementsMatch(t, []string{"2", "6"}, b.ids())
	cancel()
	require.ErrorIs(t, <-hung, context.Canceled)
}

// A broker going down and coming back is logged once each, WARN then INFO with the outage's
// length; checks that find it still down or still up log nothing.
func TestRouterLogsOutageOnce(t *testing.T) {
	a := newFake()
	var buf bytes.Buffer
	r := newRouter(t, mq.RouterConfig{
		Brokers: []mq.Broker{{Name: "a", Publisher: a}},
		Logger:  slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	r.CheckNow(t.Context(), time.Second)
	a.set(false, errors.New("connection refused"))
	for range 5 {
		r.CheckNow(t.Context(), time.Second)
	}
	a.set(false, nil)
	for range 3 {
		r.CheckNow(t.Context(), time.Second)
	}
	var lines []map[string]any
	for line := range strings.Lines(buf.String()) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		lines = append(lines, m)
	}
	require.Len(t, lines, 3, "up at the first check, down once, up again once: %s", buf.String())
	require.Equal(t, "INFO", lines[0]["level"])
	require.Equal(t, "WARN", lines[1]["level"])
	require.Contains(t, lines[1]["error"], "connection refused")
	require.Equal(t, "INFO", lines[2]["level"])
	require.Equal(t, "broker is up again", lines[2]["msg"])
	require.NotEmpty(t, lines[2]["outage"], "the outage's length")
}
