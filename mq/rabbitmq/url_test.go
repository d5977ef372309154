package rabbitmq

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// RabbitMQ URLs: courier's exchange and declare options, amqp091's own passed through,
// anything else refused.
func TestParseURL(t *testing.T) {
	cfg, err := parseURL("amqp://guest:guest@127.0.0.1:5672/")
	require.NoError(t, err)
	require.Equal(t, DefaultExchange, cfg.exchange)
	require.True(t, cfg.declare)
	require.Equal(t, "amqp://guest:xxxxx@127.0.0.1:5672/", cfg.addr)

	cfg, err = parseURL("amqps://u:p@mq.example/prod?exchange=events&declare=0&heartbeat=5&cacertfile=/ca.pem")
	require.NoError(t, err)
	require.Equal(t, "events", cfg.exchange)
	require.False(t, cfg.declare)
	require.Equal(t, "amqps://u:p@mq.example/prod?cacertfile=%2Fca.pem&heartbeat=5", cfg.url, "courier's options are not passed on")

	cfg, err = parseURL("amqp://h/?exchange=")
	require.NoError(t, err)
	require.Empty(t, cfg.exchange, "the default exchange")

	for _, c := range []struct{ url, want string }{
		{"kafka://h", "want amqp:// or amqps://"},
		{"amqp://h?mandatory=0", `unknown option "mandatory"`},
		{"amqp://h?declare=perhaps", "not a boolean"},
		{"amqp://h?heartbeat=x", "heartbeat"},
	} {
		_, err := parseURL(c.url)
		require.ErrorContains(t, err, c.want, c.url)
	}
}
