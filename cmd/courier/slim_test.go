package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// slimFlags are the Dockerfile's build flags, read from its go build line, so this test builds
// what the image ships.
func slimFlags(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^RUN CGO_ENABLED=0 go build (.*) -o /out/courier \./cmd/courier$`).FindStringSubmatch(string(raw))
	require.NotNil(t, m, "the Dockerfile builds ./cmd/courier")
	require.Contains(t, m[1], "-tags slim", "the image's binary is the slim build")
	return []string{"-tags", "slim", "-trimpath"}
}

// The image's build (-tags slim) links neither the Temporal server, its UI server nor the NATS
// server; its courier dev and courier bench say plainly that this build has no embedded stack
// and exit 1, while its other commands work.
func TestSlimBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds courier")
	}
	flags := slimFlags(t)
	out, err := exec.Command("go", append(append([]string{"list", "-deps"}, flags[:2]...), ".")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, pkg := range strings.Fields(string(out)) {
		for _, heavy := range []string{"go.temporal.io/server", "github.com/temporalio/ui-server", "github.com/nats-io/nats-server", "github.com/courier-oss/courier/devstack"} {
			require.False(t, strings.HasPrefix(pkg, heavy), "the slim build links %s", pkg)
		}
	}
	bin := filepath.Join(t.TempDir(), "courier")
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", bin, ".")...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, sub := range []string{"dev", "bench"} {
		out, err = exec.Command(bin, sub).CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%s", out)
		require.Equal(t, 1, ee.ExitCode())
		require.Contains(t, string(out), "this build has no embedded stack", "courier %s", sub)
	}
	out, err = exec.Command(bin, "version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(bin, "worker", "-h").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "TEMPORAL_ADDRESS")
}
