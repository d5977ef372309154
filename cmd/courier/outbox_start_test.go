package main

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/relay"
)

// The relay starts 16 delivery workflows at once against a Temporal cluster, 2 in courier dev
// (the engine is in the process), either set by flag or environment, within 1–256.
func TestOutboxStartWorkersConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		dev  bool
		env  string
		args []string
		want int
		bad  bool
	}{
		{name: "worker default", want: relay.DefaultStartWorkers},
		{name: "dev default", dev: true, want: relay.EmbeddedStartWorkers},
		{name: "flag", dev: true, args: []string{"--outbox-start-workers", "8"}, want: 8},
		{name: "env", env: "5", want: 5},
		{name: "zero", args: []string{"--outbox-start-workers", "0"}, bad: true},
		{name: "too many", env: "257", bad: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("COURIER_OUTBOX_START_WORKERS", c.env)
			var cfg Config
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			if c.dev {
				cfg.Outbox.StartWorkers = relay.EmbeddedStartWorkers // as runDev does
				cfg.bindRuntime(fs)
			} else {
				cfg.bind(fs, "127.0.0.1:0")
			}
			require.NoError(t, fs.Parse(append([]string{}, c.args...)))
			cfg.Temporal.Address, cfg.Temporal.Namespace = "embedded:7233", "courier" // as runDev sets them
			cfg.DatabaseURL, cfg.NATSURL = "sqlite:x", "nats://embedded:4222"
			err := cfg.Validate(true)
			if c.bad {
				require.ErrorContains(t, err, "outbox start workers must be from 1 to 256")
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, cfg.Outbox.StartWorkers)
		})
	}
}

// courier dev starts 2 at once by default, courier worker 16: as each command's help says.
func TestOutboxStartWorkersDefaults(t *testing.T) {
	t.Parallel()
	for cmd, want := range map[string]int{"dev": relay.EmbeddedStartWorkers, "worker": relay.DefaultStartWorkers} {
		stdout, stderr, _ := runCourier(t, cmd, "--help")
		help := stdout + stderr
		i := strings.Index(help, "-outbox-start-workers int")
		require.GreaterOrEqual(t, i, 0, "courier %s --help names --outbox-start-workers", cmd)
		line := help[i:]
		line = line[:strings.Index(line, ")\n")+1]
		require.Contains(t, line, fmt.Sprintf("(COURIER_OUTBOX_START_WORKERS) (default %d)", want), "courier %s", cmd)
	}
}
