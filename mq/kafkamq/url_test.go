package kafkamq

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Kafka URLs: a list of brokers with a default port, TLS and SASL options, secrets in the user
// info or the query, and refusals that name the problem without showing the password.
func TestParseURL(t *testing.T) {
	cfg, err := parseURL("kafka://a:9093,b,[::1]:9094")
	require.NoError(t, err)
	require.Equal(t, []string{"a:9093", "b:9092", "[::1]:9094"}, cfg.brokers)
	require.Nil(t, cfg.tls)
	require.Nil(t, cfg.sasl)
	require.False(t, cfg.autoCreate)

	cfg, err = parseURL("KAFKA://u:p%40ss@h:1/?tls=1&sasl=scram-sha-256&auto_create=true")
	require.NoError(t, err)
	require.Equal(t, []string{"h:1"}, cfg.brokers)
	require.NotNil(t, cfg.tls)
	require.Equal(t, "SCRAM-SHA-256", cfg.sasl.Name())
	require.True(t, cfg.autoCreate)

	cfg, err = parseURL("kafka://h?sasl=PLAIN&user=u&password=p&tls_server_name=kafka.internal")
	require.NoError(t, err)
	require.Equal(t, "PLAIN", cfg.sasl.Name())
	require.Equal(t, "kafka.internal", cfg.tls.ServerName, "tls_server_name implies TLS")

	cfg, err = parseURL("kafka://h?sasl=scram-sha-512&user=u&password=p")
	require.NoError(t, err)
	require.Equal(t, "SCRAM-SHA-512", cfg.sasl.Name())

	for _, c := range []struct{ url, want string }{
		{"nats://h:4222", "want kafka://"},
		{"kafka://", "empty broker address"},
		{"kafka://a,,b", "empty broker address"},
		{"kafka://a:port", "not host:port"},
		{"kafka://a:70000", "not host:port"},
		{"kafka://a/topic", "path"},
		{"kafka://a?acks=1", `unknown option "acks"`},
		{"kafka://a?tls=maybe", "not a boolean"},
		{"kafka://a?sasl=gssapi&user=u", "want plain, scram-sha-256 or scram-sha-512"},
		{"kafka://a?sasl=plain", "needs a user"},
		{"kafka://u:secret@a", "needs sasl="},
		{"kafka://a?tls_cert=/x.pem", "go together"},
		{"kafka://a?tls_ca=/does/not/exist.pem", "tls_ca"},
	} {
		_, err := parseURL(c.url)
		require.ErrorContains(t, err, c.want, c.url)
		require.NotContains(t, err.Error(), "secret", "errors never show the password")
	}
}
