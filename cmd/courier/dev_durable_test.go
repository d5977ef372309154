package main

import (
	"flag"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// --durable and COURIER_DEV_DURABLE reach the embedded engine's config (devstack turns it into
// synchronous=FULL; its own test checks that).
func TestDevDurableReachesTheEngine(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  string
		args []string
		want bool
	}{
		{name: "default", want: false},
		{name: "flag", args: []string{"--durable"}, want: true},
		{name: "env", env: "1", want: true},
		{name: "flag overrides env", env: "true", args: []string{"--durable=false"}, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("COURIER_DEV_DURABLE", tc.env)
			var (
				dev DevConfig
				env envReader
			)
			fs := flag.NewFlagSet("dev", flag.ContinueOnError)
			dev.bind(fs, &env)
			require.NoError(t, fs.Parse(tc.args))
			require.Empty(t, env.errs)
			got := dev.temporal("courier", nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
			require.Equal(t, tc.want, got.Durable)
			require.Equal(t, dev.DataDir, got.DataDir)
		})
	}
}
