package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// runCourier runs the test binary as courier with args and returns stdout, stderr and the exit
// code. Nothing here reaches a database, Temporal or a broker: help and usage come first.
func runCourier(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := courierCmd(t, []string{"DATABASE_URL=", "COURIER_BENCH_POSTGRES_URL="}, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return stdout.String(), stderr.String(), code
}

// Every command and subcommand answers -h (and --help) with its usage on stdout and exit 0,
// and nothing on stderr; the command list in courier's own usage is the list tested.
func TestEveryCommandHasHelp(t *testing.T) {
	t.Parallel()
	top, _, code := runCourier(t, "-h")
	require.Equal(t, 0, code)
	var commands []string
	for _, m := range regexp.MustCompile(`(?m)^  courier ([a-z-]+) `).FindAllStringSubmatch(top, -1) {
		commands = append(commands, m[1])
	}
	require.ElementsMatch(t, []string{"dev", "migrate", "worker", "gateway", "apikey", "pause", "resume", "pauses", "queue", "bench", "version"}, commands)

	cases := [][]string{{"help"}, {"--help"}}
	for _, c := range commands {
		cases = append(cases, []string{c, "-h"}, []string{c, "--help"})
	}
	for _, sub := range []string{"create", "revoke", "set-rate"} {
		cases = append(cases, []string{"apikey", sub, "-h"})
	}
	for _, sub := range []string{"outbox", "timers", "tasks"} {
		cases = append(cases, []string{"bench", sub, "-h"})
	}
	for _, sub := range []string{"list", "show", "set"} {
		cases = append(cases, []string{"queue", sub, "-h"})
	}
	for _, args := range cases {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := runCourier(t, args...)
			require.Equal(t, 0, code, "stderr: %s", stderr)
			require.Empty(t, stderr)
			require.Contains(t, stdout, "Usage:")
			require.Equal(t, 1, strings.Count(stdout, "Usage:"), stdout)
			if len(args) == 3 || (len(args) == 2 && args[0] != "apikey" && args[0] != "bench" && args[0] != "queue") {
				require.Contains(t, stdout, "Flags:")
			}
		})
	}
}

// courier version prints the build's version on one line (a test binary has no VCS stamp: its
// module version is "(devel)"), and the toolchain.
func TestVersionCommand(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runCourier(t, "version")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `^courier \S+( \(commit [0-9a-f]{12}[^)]*\))? built with go1\.\d+`, stdout)
	require.Equal(t, 1, strings.Count(stdout, "\n"))
}

// A group's help lists its subcommands; a group called without one, or with an unknown one,
// or a command given an unknown flag says why and shows the usage once, on stderr, exit 2.
func TestUsageMistakes(t *testing.T) {
	t.Parallel()
	stdout, _, code := runCourier(t, "bench", "-h")
	require.Equal(t, 0, code)
	for _, sub := range []string{"outbox", "timers", "tasks"} {
		require.Contains(t, stdout, "courier bench "+sub)
	}
	stdout, _, code = runCourier(t, "apikey", "--help")
	require.Equal(t, 0, code)
	for _, sub := range []string{"create", "revoke", "set-rate"} {
		require.Contains(t, stdout, "courier apikey "+sub)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench"}, "courier bench: no benchmark given\n\nUsage: courier bench <benchmark>"},
		{[]string{"bench", "nope"}, `courier bench: unknown benchmark "nope"`},
		{[]string{"apikey"}, "courier apikey: no action given\n\nUsage: courier apikey <action>"},
		{[]string{"queue"}, "courier queue: no action given\n\nUsage: courier queue <action>"},
		{[]string{"queue", "show"}, "courier queue: --name is required\n\nUsage: courier queue show [flags]"},
		{[]string{"queue", "set", "--name", "docs"}, "courier queue: nothing to set: give --dispatch-mode, --push-batch-size or --concurrency-limit"},
		{[]string{"migrate", "--nope"}, "courier migrate: flag provided but not defined: -nope\n\nUsage: courier migrate [flags]"},
		{[]string{"bench", "outbox", "extra"}, `courier bench: unexpected argument "extra"`},
		{[]string{"nope"}, `courier: unknown command "nope"`},
		{nil, "Usage:"},
	} {
		stdout, stderr, code := runCourier(t, tc.args...)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr)
		require.Empty(t, stdout, "%v", tc.args)
		require.Contains(t, stderr, tc.want, "%v", tc.args)
		require.Equal(t, 1, strings.Count(stderr, "Usage"), "%v: the usage once: %s", tc.args, stderr)
	}
}

// An outbox budget whose longest wait is shorter than its first would make Temporal refuse the
// delivery's retry policy, so every record would go dead at its first failure: it is refused
// before anything starts.
func TestOutboxRetryIntervalsAreChecked(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	args := []string{"dev", "--data-dir", dir, "--outbox-retry-initial", "10s", "--outbox-retry-max-interval", "2s"}
	_, stderr, code := runCourier(t, args...)
	require.Equal(t, 1, code, "%v: %s", args, stderr)
	require.Contains(t, stderr, "outbox retry max interval (2s) must be at least the initial interval (10s)")
	_, err := os.Stat(dir)
	require.True(t, errors.Is(err, os.ErrNotExist), "the data dir was created before the settings were checked")
}
