package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
)

// module is one module of courier's build: its version and where its source is.
type module struct{ version, dir string }

// modules asks the go command for the modules courier pins.
func modules(t *testing.T, paths ...string) map[string]module {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		prerequisite(t, ErrPrerequisite)
	}
	out, err := exec.Command("go", append([]string{"list", "-m", "-f", "{{.Path}} {{.Version}} {{.Dir}}"}, paths...)...).Output()
	require.NoError(t, err)
	mods := map[string]module{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		require.Len(t, f, 3, "go list -m: %q (is the module downloaded?)", line)
		mods[f[0]] = module{version: f[1], dir: f[2]}
	}
	return mods
}

// templateVars lists the environment variables a configuration template reads ({{ env "X" }}).
func templateVars(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	vars := map[string]bool{}
	for _, m := range regexp.MustCompile(`env "([A-Z0-9_]+)"`).FindAllStringSubmatch(string(b), -1) {
		vars[m[1]] = true
	}
	require.NotEmpty(t, vars, "no variables found in %s", path)
	return vars
}

// docker-compose.temporal.yml is valid Compose, runs the Temporal server, admin tools and UI of
// the versions courier pins (the server as separate history, matching, frontend and worker
// services; never the deprecated auto-setup image) with the environment make cluster gives
// them, sets only variables the programs read, creates the namespace with courier's retention
// and search attributes, and gives courier's services the environment make cluster gives its
// processes, every variable of which courier reads and documents.
func TestComposeFileIsTrue(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.temporal.yml")},
		cli.WithWorkingDirectory(root), cli.WithName("courier"))
	require.NoError(t, err)
	project, err := cli.ProjectFromOptions(t.Context(), opts)
	require.NoError(t, err, "the compose file loads and validates")

	mods := modules(t, "go.temporal.io/server", "github.com/temporalio/ui-server/v2")
	server, ui := mods["go.temporal.io/server"], mods["github.com/temporalio/ui-server/v2"]
	serverVars := templateVars(t, filepath.Join(server.dir, "common/config/config_template_embedded.yaml"))
	uiVars := templateVars(t, filepath.Join(ui.dir, "config/docker.yaml"))
	sqlToolVars := map[string]bool{}
	b, err := os.ReadFile(filepath.Join(server.dir, "tools/sql/main.go"))
	require.NoError(t, err)
	for _, m := range regexp.MustCompile(`EnvVar:\s+"([A-Z0-9_]+)"`).FindAllStringSubmatch(string(b), -1) {
		sqlToolVars[m[1]] = true
	}
	require.NotEmpty(t, sqlToolVars)

	serverImage := "temporalio/server:" + strings.TrimPrefix(server.version, "v")
	adminImage := "temporalio/admin-tools:" + strings.TrimPrefix(server.version, "v")
	uiImage := "temporalio/ui:" + strings.TrimPrefix(ui.version, "v")
	roles := map[string]string{}
	for name, svc := range project.Services {
		require.NotContains(t, svc.Image, "auto-setup", "%s: temporalio/auto-setup is deprecated", name)
		env := envOf(svc)
		switch {
		case strings.HasPrefix(svc.Image, "temporalio/server"):
			require.Equal(t, serverImage, svc.Image, name)
			role := env["TEMPORAL_SERVICES"]
			roles[role] = name
			for k, v := range TemporalSettings {
				require.Equal(t, v, env[k], "%s: %s as make cluster sets it", name, k)
			}
			for k := range env {
				require.True(t, serverVars[k] || k == "TEMPORAL_SERVICES", "%s: Temporal's configuration template does not read %s", name, k)
			}
			require.True(t, slices.ContainsFunc(svc.Volumes, func(v types.ServiceVolumeConfig) bool {
				return v.Source == filepath.Join(root, DynamicConfigFile) && v.Target == env["DYNAMIC_CONFIG_FILE_PATH"]
			}), "%s runs with make cluster's dynamic config (%s at DYNAMIC_CONFIG_FILE_PATH)", name, DynamicConfigFile)
		case strings.HasPrefix(svc.Image, "temporalio/admin-tools"):
			require.Equal(t, adminImage, svc.Image, name)
			for k := range env {
				require.True(t, sqlToolVars[k] || k == "TEMPORAL_ADDRESS", "%s: neither temporal-sql-tool nor the temporal CLI reads %s", name, k)
			}
		case strings.HasPrefix(svc.Image, "temporalio/"):
			require.Equal(t, uiImage, svc.Image, name)
			for k := range env {
				require.True(t, uiVars[k], "%s: the UI server's configuration template does not read %s", name, k)
			}
		}
	}
	for _, role := range TemporalServices {
		require.Contains(t, roles, role, "a service runs Temporal's %s alone", role)
	}

	// The namespace: courier's retention and every one of its search attributes.
	ns := strings.Join(project.Services["temporal-namespace"].Command, " ")
	require.Contains(t, ns, fmt.Sprintf("--retention %dh", int(DefaultRetention.Hours())))
	for name, typ := range courier.SearchAttributes {
		require.Regexp(t, `--name `+name+` --type `+string(typ)+`\b`, ns, "the namespace gets search attribute %s", name)
	}

	// courier's services: the environment make cluster gives its processes (where to find
	// Temporal, the database, NATS and the gateway; its own listen address), every variable
	// read by courier's command and documented.
	var code strings.Builder
	for _, pattern := range []string{"cmd/courier/*.go"} {
		files, err := filepath.Glob(filepath.Join(root, pattern))
		require.NoError(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			code.Write(b)
		}
	}
	var docs strings.Builder
	docFiles, err := filepath.Glob(filepath.Join(root, "docs/*.md"))
	require.NoError(t, err)
	for _, f := range append(docFiles, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		docs.Write(b)
	}
	want := map[string]bool{"COURIER_HTTP_ADDR": true}
	for _, kv := range courierEnv("", "", "", "", "") {
		if k, _, _ := strings.Cut(kv, "="); k != loopbackOnly {
			want[k] = true
		}
	}
	courierServices := 0
	for name, svc := range project.Services {
		if svc.Build == nil {
			continue
		}
		courierServices++
		env := envOf(svc)
		for k := range env {
			require.True(t, strings.Contains(code.String(), `"`+k+`"`), "%s sets %s, which courier does not read", name, k)
			require.True(t, strings.Contains(docs.String(), k), "%s sets %s, which courier's docs do not describe", name, k)
		}
		if name == "courier-migrate" {
			continue
		}
		for k := range want {
			require.Contains(t, env, k, "%s is told %s, as make cluster tells its processes", name, k)
		}
		require.Equal(t, 2, svc.GetScale(), "two of %s, as make cluster runs", name)
	}
	require.Equal(t, 3, courierServices, "migrate, worker and gateway")
}

func envOf(svc types.ServiceConfig) map[string]string {
	out := map[string]string{}
	for k, v := range svc.Environment {
		if v != nil {
			out[k] = *v
		}
	}
	return out
}
