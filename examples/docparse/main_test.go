package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/webhook"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseConfig(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig(nil, envOf(map[string]string{"COURIER_API_KEY": "k"}), io.Discard)
	require.NoError(t, err)
	require.Equal(t, Config{Addr: "127.0.0.1:9090", CourierURL: "http://127.0.0.1:8080", APIKey: "k",
		ParseTime: 5 * time.Second, Drain: 10 * time.Second}, cfg, "defaults")

	secret, err := webhook.GenerateSecret()
	require.NoError(t, err)
	env := envOf(map[string]string{"COURIER_API_KEY": "k", "DOCPARSE_ADDR": ":1", "DOCPARSE_PARSE_TIME": "2s",
		"DOCPARSE_SECRET": secret, "COURIER_URL": "https://courier.example"})
	cfg, err = ParseConfig([]string{"--addr", "127.0.0.1:9999", "--drain", "1m", "--max-concurrent", "2"}, env, io.Discard)
	require.NoError(t, err)
	require.Equal(t, Config{Addr: "127.0.0.1:9999", CourierURL: "https://courier.example", APIKey: "k", Secrets: []string{secret},
		ParseTime: 2 * time.Second, Drain: time.Minute, MaxConcurrent: 2}, cfg, "flags over the environment over the defaults")

	old, err := webhook.GenerateSecret()
	require.NoError(t, err)
	cfg, err = ParseConfig([]string{"--secret", secret + ", " + old}, env, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{secret, old}, cfg.Secrets, "two secrets during a rotation")

	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
	}{
		"no key":          {nil, nil},
		"bad secret":      {[]string{"--secret", "hunter2"}, map[string]string{"COURIER_API_KEY": "k"}},
		"bad courier URL": {[]string{"--courier-url", "127.0.0.1:8080"}, map[string]string{"COURIER_API_KEY": "k"}},
		"bad env time":    {nil, map[string]string{"COURIER_API_KEY": "k", "DOCPARSE_PARSE_TIME": "5"}},
		"negative time":   {[]string{"--parse-time", "-1s"}, map[string]string{"COURIER_API_KEY": "k"}},
		"negative max":    {[]string{"--max-concurrent", "-1"}, map[string]string{"COURIER_API_KEY": "k"}},
		"extra argument":  {[]string{"serve"}, map[string]string{"COURIER_API_KEY": "k"}},
	} {
		_, err := ParseConfig(tc.args, envOf(tc.env), io.Discard)
		require.Error(t, err, name)
	}
}

// run serves until its context is cancelled and then stops cleanly.
func TestRunStopsWhenCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"--addr", "127.0.0.1:0", "--drain", "1s"}, envOf(map[string]string{"COURIER_API_KEY": "k"}), quietLogger())
	}()
	cancel()
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("run did not stop")
	}
}
