package main

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/mq/brokers"
)

// BrokersConfig names the message-queue clusters courier publishes to and routes topics to
// them (docs/brokers.md, "Routing").
type BrokersConfig struct {
	// List is COURIER_BROKERS (or repeated --broker): name=url,…; the URL's scheme picks the
	// adapter. NATS_URL, when set (always, in courier dev), is the broker named "default",
	// placed first; with neither, "default" is nats://127.0.0.1:4222.
	List brokerList
	// Routes is COURIER_ROUTES (or repeated --route): pattern=broker,…, tried in order, the
	// first match wins. Patterns are NATS-style: '*' is one token, '>' one or more at the end.
	Routes routeList
	// Default is COURIER_DEFAULT_BROKER: the broker for topics no route matches; default the
	// first broker; "none" makes such topics unroutable (their records go dead).
	Default string
	// MaxInFlight is COURIER_BROKER_MAX_IN_FLIGHT: one broker's publishes in flight in one
	// process; past it a publish fails at once and is retried. Default 64.
	MaxInFlight int
	// CheckInterval is COURIER_BROKER_CHECK_INTERVAL: how often each broker's health is
	// checked; a broker that fails a check gets no publishes until one passes. Default 2s.
	CheckInterval time.Duration
}

// DefaultNATSURL is the default broker when neither NATS_URL nor COURIER_BROKERS is set.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// DefaultBrokerName is the name of the broker NATS_URL (and courier dev's NATS) configures.
const DefaultBrokerName = "default"

type brokerSpec struct{ Name, URL string }

type brokerList []brokerSpec

func (l *brokerList) String() string {
	return joinPairs(*l, func(b brokerSpec) (string, string) { return b.Name, mq.RedactURL(b.URL) })
}

// startsBroker matches the start of one name=url item: a URL may itself hold commas (a list of
// NATS servers or Kafka brokers, a query value), so a comma-separated piece that is not
// name=scheme://… continues the URL before it.
var (
	startsBroker = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*=[A-Za-z][A-Za-z0-9+.-]*://`)
	looseBroker  = regexp.MustCompile(`^[^=/:]*=[A-Za-z][A-Za-z0-9+.-]*://`) // a name=url item with a bad name
)

func (l *brokerList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !startsBroker.MatchString(part) {
			if name, _, _ := strings.Cut(part, "="); looseBroker.MatchString(part) || len(*l) == 0 {
				return fmt.Errorf("broker %q: want name=url, the name 1-64 of a-z, 0-9, '_', '.', '-' and the URL such as nats://host:4222 or amqp://user:pass@host:5672/", name)
			}
			(*l)[len(*l)-1].URL += "," + part
			continue
		}
		name, url, _ := strings.Cut(part, "=")
		*l = append(*l, brokerSpec{Name: name, URL: url})
	}
	return nil
}

type routeList []mq.Route

func (l *routeList) String() string {
	return joinPairs(*l, func(r mq.Route) (string, string) { return r.Pattern, r.Broker })
}

func (l *routeList) Set(v string) error {
	return splitPairs(v, func(part, pattern, broker string) error {
		if pattern == "" || broker == "" {
			return fmt.Errorf("route %q: want pattern=broker, such as points.>=points", part)
		}
		*l = append(*l, mq.Route{Pattern: strings.TrimSpace(pattern), Broker: strings.TrimSpace(broker)})
		return nil
	})
}

// bindBrokers registers the broker flags (shared by every role, courier dev included).
func (c *Config) bindBrokers(fs *flag.FlagSet) {
	c.env.list("COURIER_BROKERS", &c.Brokers.List)
	fs.Var(&c.Brokers.List, "broker", "a message-queue cluster to publish to, name=url (nats://, kafka://, amqp://); repeatable (COURIER_BROKERS, comma-separated)")
	c.env.list("COURIER_ROUTES", &c.Brokers.Routes)
	fs.Var(&c.Brokers.Routes, "route", "send topics matching a pattern to a broker, pattern=broker ('*' one token, '>' the rest: points.>=points); repeatable, first match wins (COURIER_ROUTES, comma-separated)")
	fs.StringVar(&c.Brokers.Default, "default-broker", env("COURIER_DEFAULT_BROKER", ""), `broker for topics no route matches; default the first broker ("default" when NATS_URL is set); "none": such records go dead (COURIER_DEFAULT_BROKER)`)
	fs.IntVar(&c.Brokers.MaxInFlight, "broker-max-in-flight", c.env.integer("COURIER_BROKER_MAX_IN_FLIGHT", mq.DefaultMaxInFlight), "publishes one broker may have in flight in this process; more fail at once and retry, so a hanging broker never takes every activity slot (COURIER_BROKER_MAX_IN_FLIGHT)")
	fs.DurationVar(&c.Brokers.CheckInterval, "broker-check-interval", c.env.duration("COURIER_BROKER_CHECK_INTERVAL", mq.DefaultCheckInterval), "how often each broker's health is checked; a broker that fails gets no publishes until a check passes (COURIER_BROKER_CHECK_INTERVAL)")
}

// brokerSpecs returns the brokers in order: NATS_URL's "default" first when it is set, or
// when no broker is named at all, then COURIER_BROKERS.
func (c *Config) brokerSpecs() []brokerSpec {
	var out []brokerSpec
	switch {
	case c.NATSURL != "":
		out = append(out, brokerSpec{Name: DefaultBrokerName, URL: c.NATSURL})
	case len(c.Brokers.List) == 0:
		out = append(out, brokerSpec{Name: DefaultBrokerName, URL: DefaultNATSURL})
	}
	return append(out, c.Brokers.List...)
}

// validateBrokers checks the brokers, routes and default broker without connecting.
func (c *Config) validateBrokers() error {
	specs := c.brokerSpecs()
	names := map[string]bool{}
	var list []string
	for _, b := range specs {
		if err := mq.CheckBrokerName(b.Name); err != nil {
			return fmt.Errorf("COURIER_BROKERS: %w", err)
		}
		if names[b.Name] {
			if b.Name == DefaultBrokerName && c.NATSURL != "" {
				return errors.New(`COURIER_BROKERS: broker "default" is also NATS_URL's name: rename it, or unset NATS_URL`)
			}
			return fmt.Errorf("COURIER_BROKERS: broker %q is named twice", b.Name)
		}
		names[b.Name] = true
		list = append(list, b.Name)
		if err := brokers.CheckURL(b.URL); err != nil {
			return fmt.Errorf("broker %q: %w", b.Name, err)
		}
	}
	for i, r := range c.Brokers.Routes {
		if _, err := mq.ParseRoutePattern(r.Pattern); err != nil {
			return fmt.Errorf("COURIER_ROUTES: route %d (%s=%s): %w", i+1, r.Pattern, r.Broker, err)
		}
		if !names[r.Broker] {
			return fmt.Errorf("COURIER_ROUTES: route %d (%s=%s) names broker %q, which is not configured (brokers: %s)",
				i+1, r.Pattern, r.Broker, r.Broker, strings.Join(list, ", "))
		}
	}
	if d := c.Brokers.Default; d != "" && d != mq.NoDefaultBroker && !names[d] {
		return fmt.Errorf("COURIER_DEFAULT_BROKER %q is not configured (brokers: %s, or %q for none)", d, strings.Join(list, ", "), mq.NoDefaultBroker)
	}
	switch {
	case c.Brokers.MaxInFlight < 1 || c.Brokers.MaxInFlight > 10000:
		return errors.New("COURIER_BROKER_MAX_IN_FLIGHT must be from 1 to 10000")
	case c.Brokers.CheckInterval < 100*time.Millisecond:
		return errors.New("COURIER_BROKER_CHECK_INTERVAL must be at least 100ms")
	}
	return nil
}
