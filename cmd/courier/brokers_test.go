package main

import (
	"flag"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/mq"
)

func brokerConfig(t *testing.T, env map[string]string, args ...string) (Config, error) {
	t.Helper()
	for _, k := range []string{"NATS_URL", "COURIER_BROKERS", "COURIER_ROUTES", "COURIER_DEFAULT_BROKER"} {
		t.Setenv(k, env[k])
	}
	var cfg Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	cfg.bind(fs, "127.0.0.1:0")
	require.NoError(t, fs.Parse(append([]string{"--database-url", "sqlite:x"}, args...)))
	return cfg, cfg.Validate(true)
}

// Without any broker setting courier publishes to one NATS, the broker "default"; NATS_URL
// keeps naming it, first, beside the named brokers; a URL may hold a list of servers.
func TestBrokerConfig(t *testing.T) {
	cfg, err := brokerConfig(t, nil)
	require.NoError(t, err)
	require.Equal(t, []brokerSpec{{"default", "nats://127.0.0.1:4222"}}, cfg.brokerSpecs())
	require.Empty(t, cfg.Brokers.Routes)
	require.Equal(t, mq.DefaultMaxInFlight, cfg.Brokers.MaxInFlight)

	cfg, err = brokerConfig(t, map[string]string{
		"NATS_URL":        "nats://10.0.0.1:4222",
		"COURIER_BROKERS": "points=nats://p1:4222,nats://p2:4222, coupons=nats://user:secret@c:4222",
		"COURIER_ROUTES":  "points.>=points, coupons.*=coupons",
	})
	require.NoError(t, err)
	require.Equal(t, []brokerSpec{
		{"default", "nats://10.0.0.1:4222"},
		{"points", "nats://p1:4222,nats://p2:4222"},
		{"coupons", "nats://user:secret@c:4222"},
	}, cfg.brokerSpecs())
	require.Equal(t, routeList{{Pattern: "points.>", Broker: "points"}, {Pattern: "coupons.*", Broker: "coupons"}}, cfg.Brokers.Routes)
	require.Equal(t, "default=nats://10.0.0.1:4222,points=nats://p1:4222,nats://p2:4222,coupons=nats://user:xxxxx@c:4222",
		(&brokerList{{"default", "nats://10.0.0.1:4222"}, cfg.Brokers.List[0], cfg.Brokers.List[1]}).String(), "passwords never show")

	// The scheme picks the adapter; a Kafka URL lists its hosts with commas too.
	cfg, err = brokerConfig(t, map[string]string{
		"COURIER_BROKERS": "points=amqp://guest:guest@127.0.0.1:5672/,coupons=nats://127.0.0.1:4222,log=kafka://k1:9092,k2:9092?tls=1",
		"COURIER_ROUTES":  "points.>=points,coupons.>=coupons,audit.>=log",
	})
	require.NoError(t, err)
	require.Equal(t, []brokerSpec{
		{"points", "amqp://guest:guest@127.0.0.1:5672/"},
		{"coupons", "nats://127.0.0.1:4222"},
		{"log", "kafka://k1:9092,k2:9092?tls=1"},
	}, cfg.brokerSpecs())
	require.Equal(t, "points=amqp://guest:xxxxx@127.0.0.1:5672/,coupons=nats://127.0.0.1:4222,log=kafka://k1:9092,k2:9092?tls=1", cfg.Brokers.List.String())

	// Flags add to the environment's; without NATS_URL the first named broker is the default.
	cfg, err = brokerConfig(t, map[string]string{"COURIER_BROKERS": "points=nats://p:4222"},
		"--broker", "coupons=nats://c:4222", "--route", "coupons.>=coupons", "--default-broker", "none")
	require.NoError(t, err)
	require.Equal(t, []brokerSpec{{"points", "nats://p:4222"}, {"coupons", "nats://c:4222"}}, cfg.brokerSpecs())
	require.Equal(t, "none", cfg.Brokers.Default)
}

// Every mistake is refused at start with a message that names the setting and the fix.
func TestBrokerConfigRefusals(t *testing.T) {
	for want, env := range map[string]map[string]string{
		`COURIER_BROKERS: broker "Points": want name=url`:                                                       {"COURIER_BROKERS": "Points=nats://p:4222"},
		`COURIER_BROKERS: broker "points": want name=url`:                                                       {"COURIER_BROKERS": "points"},
		`COURIER_BROKERS: broker name "none" is reserved`:                                                       {"COURIER_BROKERS": "none=nats://p:4222"},
		`COURIER_BROKERS: broker "p" is named twice`:                                                            {"COURIER_BROKERS": "p=nats://a:4222,p=nats://b:4222"},
		`broker "default" is also NATS_URL's name`:                                                              {"NATS_URL": "nats://a:4222", "COURIER_BROKERS": "default=nats://b:4222"},
		`unsupported scheme "redis"`:                                                                            {"COURIER_BROKERS": "p=redis://a:6379"},
		`COURIER_ROUTES: route "points.>": want pattern=broker`:                                                 {"COURIER_ROUTES": "points.>"},
		`COURIER_ROUTES: route 2 (b.*=nope) names broker "nope", which is not configured (brokers: default, a)`: {"COURIER_BROKERS": "a=nats://a:4222", "NATS_URL": "nats://d:4222", "COURIER_ROUTES": "a.>=a,b.*=nope"},
		`COURIER_ROUTES: route 1 (a.>.b=default): pattern "a.>.b": '>' must be the last token`:                  {"COURIER_ROUTES": "a.>.b=default"},
		`COURIER_DEFAULT_BROKER "nope" is not configured (brokers: default, or "none" for none)`:                {"COURIER_DEFAULT_BROKER": "nope"},
	} {
		_, err := brokerConfig(t, env)
		require.ErrorContains(t, err, want, "%v", env)
	}
	_, err := brokerConfig(t, nil, "--broker-max-in-flight", "0")
	require.ErrorContains(t, err, "COURIER_BROKER_MAX_IN_FLIGHT must be from 1 to 10000")
	_, err = brokerConfig(t, nil, "--broker-check-interval", "10ms")
	require.ErrorContains(t, err, "COURIER_BROKER_CHECK_INTERVAL must be at least 100ms")
}
