package workflows_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The workflows link no I/O of courier's: they reach the activities through their contract
// (activities/contract) only, so neither the store, the message queue adapters, the gateway,
// nor their drivers and clients are in the workflow binary's import graph. net/http is there,
// and fine: the Temporal SDK brings it.
func TestWorkflowsLinkNoAdapters(t *testing.T) {
	// go test puts its own GOROOT/bin first in PATH, so this is the go that runs the test.
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go command runs this test, so it is on PATH")
	out, err := exec.CommandContext(t.Context(), goTool, "list", "-deps", "-test=false", ".").Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
	}
	require.NoError(t, err)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/courier-oss/courier/workflows", "go list ran on this package")
	require.Contains(t, deps, "github.com/courier-oss/courier/activities/contract")

	const mod = "github.com/courier-oss/courier/"
	exact := []string{mod + "activities", "database/sql"} // activities/contract and database/sql/driver (from uuid) are fine
	trees := []string{
		mod + "store", mod + "mq", mod + "gateway", mod + "outbox",
		"github.com/uptrace/bun", "github.com/nats-io/nats.go", "github.com/rabbitmq", "github.com/twmb/franz-go",
	}
	for _, d := range deps {
		for _, f := range exact {
			require.NotEqual(t, f, d, "workflows must not link %s", f)
		}
		for _, f := range trees {
			require.False(t, d == f || strings.HasPrefix(d, f+"/"),
				"workflows must not link %s (found %s)", f, d)
		}
	}
}
