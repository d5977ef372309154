package main

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/store"
)

// Keys are unlimited unless a rate is set; a rate of 0 is unlimited whatever the burst (the
// documented way to turn the limit off), and bad rates are refused.
func TestKeyRateConfig(t *testing.T) {
	for _, c := range []struct {
		args []string
		want courier.Rate
		bad  string
	}{
		{nil, courier.Rate{}, ""},
		{[]string{"--key-rate-limit", "0"}, courier.Rate{}, ""},
		{[]string{"--key-rate-limit", "0", "--key-rate-burst", "200"}, courier.Rate{}, ""},
		{[]string{"--key-rate-limit", "2.5", "--key-rate-burst", "0"}, courier.Rate{PerSecond: 2.5}, ""},
		{[]string{"--key-rate-limit", "100", "--key-rate-burst", "200"}, courier.Rate{PerSecond: 100, Burst: 200}, ""},
		{[]string{"--key-rate-limit", "-1"}, courier.Rate{PerSecond: -1}, "COURIER_KEY_RATE_LIMIT must be"},
		{[]string{"--key-rate-limit", "5", "--key-rate-burst", "-3"}, courier.Rate{PerSecond: 5, Burst: -3}, "COURIER_KEY_RATE_BURST must be"},
	} {
		var cfg Config
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		cfg.bind(fs, "127.0.0.1:0")
		require.NoError(t, fs.Parse(append([]string{"--database-url", "sqlite:x"}, c.args...)))
		err := cfg.Validate(true)
		require.Equal(t, c.want, cfg.KeyRate, "%v", c.args)
		if c.bad == "" {
			require.NoError(t, err, "%v", c.args)
		} else {
			require.ErrorContains(t, err, c.bad, "%v", c.args)
		}
	}
}

// courier apikey create --rate and set-rate store a key's own rate; bad rates are refused.
func TestAPIKeyRateCommands(t *testing.T) {
	ctx := t.Context()
	db := "sqlite:" + filepath.Join(t.TempDir(), "courier.db")
	require.NoError(t, runMigrate(ctx, []string{"--database-url", db}))
	require.NoError(t, runAPIKey(ctx, []string{"create", "--database-url", db, "--name", "orders", "--rate", "5", "--burst", "10"}))
	require.ErrorContains(t, runAPIKey(ctx, []string{"create", "--database-url", db, "--name", "x", "--rate", "-1"}), "--rate must be")
	require.ErrorContains(t, runAPIKey(ctx, []string{"create", "--database-url", db, "--name", "x", "--burst", "4"}), "--burst needs --rate")
	require.ErrorContains(t, runAPIKey(ctx, []string{"set-rate", "--database-url", db, "--id", "key_x"}), "--rate is required")

	st, err := store.Open(ctx, db)
	require.NoError(t, err)
	defer st.Close()
	var row struct {
		ID    string   `bun:"id"`
		Rate  *float64 `bun:"rate_per_second"`
		Burst int      `bun:"rate_burst"`
	}
	read := func() {
		row.Rate = nil
		require.NoError(t, st.DB().NewRaw("SELECT id, rate_per_second, rate_burst FROM courier_api_keys WHERE name = 'orders'").Scan(ctx, &row))
	}
	read()
	require.NotNil(t, row.Rate)
	require.Equal(t, 5.0, *row.Rate)
	require.Equal(t, 10, row.Burst)

	require.NoError(t, runAPIKey(ctx, []string{"set-rate", "--database-url", db, "--id", row.ID, "--rate", "0"}))
	read()
	require.NotNil(t, row.Rate)
	require.Zero(t, *row.Rate, "0: unlimited")
	require.NoError(t, runAPIKey(ctx, []string{"set-rate", "--database-url", db, "--id", row.ID, "--rate", "default"}))
	read()
	require.Nil(t, row.Rate, "default: the gateway's rate")
	require.Error(t, runAPIKey(ctx, []string{"set-rate", "--database-url", db, "--id", "key_nope", "--rate", "1"}))
}
