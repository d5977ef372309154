package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// courierModule is courier's module path.
const courierModule = "github.com/courier-oss/courier"

// Binaries are the programs the topology runs.
type Binaries struct {
	TemporalServer string // go.temporal.io/server/cmd/server, the version go.mod pins
	SQLTool        string // go.temporal.io/server/cmd/tools/sql, Temporal's schema tool
	Courier        string // ./cmd/courier
}

// buildTargets maps each binary's file name to its package. The Temporal ones are tools of
// courier's module (the tool block of go.mod), so their dependencies are pinned in go.sum and
// they build offline from the module cache.
var buildTargets = []struct{ file, pkg string }{
	{"temporal-server", "go.temporal.io/server/cmd/server"},
	{"temporal-sql-tool", "go.temporal.io/server/cmd/tools/sql"},
	{"courier", courierModule + "/cmd/courier"},
}

// Build compiles the binaries into dir with the go command, from inside courier's module (the
// current directory or one under it). The compiles are kept in Go's build cache, so only the
// first build on a machine (a few minutes for the Temporal server) is slow; later ones only
// link.
func Build(ctx context.Context, dir string, progress func(string)) (Binaries, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return Binaries{}, fmt.Errorf("%w: the go command, to build the Temporal server courier pins", ErrPrerequisite)
	}
	// The Temporal binaries build from the versions and checksums courier's go.mod and go.sum
	// pin, so the go command must run inside courier's module.
	mod, err := exec.CommandContext(ctx, goBin, "list", "-m", "-f", "{{.Path}}").Output()
	if got := strings.TrimSpace(string(mod)); err != nil || got != courierModule {
		return Binaries{}, fmt.Errorf("run this inside courier's repository (the go command finds module %q here, not %s)", got, courierModule)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, err
	}
	out := map[string]string{}
	for _, t := range buildTargets {
		path := filepath.Join(dir, t.file)
		if progress != nil {
			progress("building " + t.file)
		}
		cmd := exec.CommandContext(ctx, goBin, "build", "-o", path, t.pkg)
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
		if b, err := cmd.CombinedOutput(); err != nil {
			return Binaries{}, fmt.Errorf("go build %s: %w\n%s", t.pkg, err, strings.TrimSpace(string(b)))
		}
		out[t.file] = path
	}
	return Binaries{TemporalServer: out["temporal-server"], SQLTool: out["temporal-sql-tool"], Courier: out["courier"]}, nil
}
