package courier_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The packages that reach a broker only through the mq port link no broker client: the
// adapters (mq/natsmq, mq/kafkamq, mq/rabbitmq) and mq/brokers, which dials them by scheme,
// are wired in by cmd/courier only. The gateway also reaches the database only through the
// interfaces it declares, so it links neither the store nor a database driver.
// (workflows/deps_test.go holds the stricter rule for the workflows.)
func TestLayersLinkNoAdapters(t *testing.T) {
	const mod = "github.com/courier-oss/courier/"
	brokerClients := []string{
		mod + "mq/natsmq", mod + "mq/kafkamq", mod + "mq/rabbitmq", mod + "mq/brokers",
		"github.com/nats-io", // nats.go, nats-server, nkeys, nuid
		"github.com/twmb/franz-go",
		"github.com/rabbitmq/amqp091-go",
	}
	databaseDrivers := []string{
		"github.com/lib/pq", "modernc.org/sqlite",
		"github.com/uptrace/bun/dialect/pgdialect", "github.com/uptrace/bun/dialect/sqlitedialect",
		"github.com/uptrace/bun/driver",
	}
	// Exact packages: the store itself (its driver-free store/outboxsql, which the outbox helper
	// imports, is fine) and bun's database handle (bun/schema, also the outbox helper's, is fine).
	gatewayExact := []string{mod + "store", "github.com/uptrace/bun"}
	rules := map[string]struct{ trees, exact []string }{
		mod + "metrics": {trees: brokerClients},
		mod + "tasks":   {trees: brokerClients},
		mod + "timers":  {trees: brokerClients},
		mod + "gateway": {trees: append(append([]string(nil), brokerClients...), databaseDrivers...), exact: gatewayExact},
	}

	// go test puts its own GOROOT/bin first in PATH, so this is the go that runs the test.
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go command runs this test, so it is on PATH")
	args := []string{"list", "-test=false", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}"}
	for pkg := range rules {
		args = append(args, pkg)
	}
	out, err := exec.CommandContext(t.Context(), goTool, args...).Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		t.Fatalf("go list: %v\n%s", err, ee.Stderr)
	}
	require.NoError(t, err)

	seen := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg, deps := fields[0], fields[1:]
		rule, ok := rules[pkg]
		require.True(t, ok, "go list answered for %s, which was not asked for", pkg)
		seen[pkg] = true
		require.Contains(t, deps, "github.com/courier-oss/courier", "go list listed %s's dependencies", pkg)
		for _, d := range deps {
			for _, f := range rule.trees {
				require.False(t, d == f || strings.HasPrefix(d, f+"/"), "%s must not link %s (found %s)", pkg, f, d)
			}
			require.NotContains(t, rule.exact, d, "%s must not link %s", pkg, d)
		}
	}
	for pkg := range rules {
		require.True(t, seen[pkg], "go list said nothing of %s", pkg)
	}
}
