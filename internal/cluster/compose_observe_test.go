package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// TestComposeIsUsable: docker-compose.temporal.yml as the README's examples and an operator use
// it. NATS answers a health check that includes JetStream and courier waits for it; the stream
// the README publishes to (ORDERS, orders.>) is created once NATS is healthy; Prometheus loads
// courier's alert rules and scrapes every worker and gateway on the ports they serve /metrics
// on (its configuration passes promtool); Grafana loads the dashboard with Prometheus as its
// default data source.
func TestComposeIsUsable(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.temporal.yml")},
		cli.WithWorkingDirectory(root), cli.WithName("courier"))
	require.NoError(t, err)
	project, err := cli.ProjectFromOptions(t.Context(), opts)
	require.NoError(t, err)
	svc := func(name string) types.ServiceConfig {
		s, ok := project.Services[name]
		require.True(t, ok, "a %s service", name)
		return s
	}

	nats := svc("nats")
	require.NotNil(t, nats.HealthCheck, "NATS has a health check")
	require.Contains(t, strings.Join(nats.HealthCheck.Test, " "), "/healthz?js-enabled-only=true", "the health check includes JetStream")
	require.Contains(t, strings.Join(nats.Command, " "), "-m 8222", "the health check's monitoring port is on")
	for _, name := range []string{"courier-worker", "courier-gateway"} {
		require.Equal(t, types.ServiceConditionHealthy, svc(name).DependsOn["nats"].Condition, "%s waits for a healthy NATS", name)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	require.Contains(t, string(readme), "stream add ORDERS --subjects 'orders.>'", "the README's stream")
	streams := svc("nats-streams")
	require.Equal(t, types.ServiceConditionHealthy, streams.DependsOn["nats"].Condition)
	require.Contains(t, strings.Join(streams.Command, " "), "stream add ORDERS --subjects 'orders.>'", "compose creates the README's stream")

	mounts := func(s types.ServiceConfig) map[string]string {
		out := map[string]string{}
		for _, v := range s.Volumes {
			out[v.Target] = v.Source
		}
		return out
	}
	prom := mounts(svc("prometheus"))
	require.Equal(t, filepath.Join(root, "deploy/prometheus/courier-rules.yml"), prom["/etc/prometheus/courier-rules.yml"])
	require.Equal(t, filepath.Join(root, "deploy/prometheus/compose.yml"), prom["/etc/prometheus/prometheus.yml"])
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			DNS []struct {
				Names []string `yaml:"names"`
				Port  int      `yaml:"port"`
			} `yaml:"dns_sd_configs"`
		} `yaml:"scrape_configs"`
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy/prometheus/compose.yml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &cfg))
	require.Equal(t, []string{"/etc/prometheus/courier-rules.yml"}, cfg.RuleFiles, "the rules where the service mounts them")
	scraped := map[string]int{}
	for _, sc := range cfg.ScrapeConfigs {
		for _, d := range sc.DNS {
			for _, n := range d.Names {
				scraped[n] = d.Port
			}
		}
	}
	listen := func(name string) string { return *svc(name).Environment["COURIER_HTTP_ADDR"] }
	require.Equal(t, "0.0.0.0:9090", listen("courier-worker"))
	require.Equal(t, "0.0.0.0:8080", listen("courier-gateway"))
	require.Equal(t, map[string]int{"courier-worker": 9090, "courier-gateway": 8080}, scraped, "every worker and gateway, on its metrics port")
	if promtool, err := exec.LookPath("promtool"); err == nil {
		// promtool reads the rule files from the paths the config names: check a copy that
		// points at the repository's rules.
		dir := t.TempDir()
		local := strings.ReplaceAll(string(raw), "/etc/prometheus/courier-rules.yml", filepath.Join(root, "deploy/prometheus/courier-rules.yml"))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(local), 0o644))
		out, err := exec.Command(promtool, "check", "config", filepath.Join(dir, "prometheus.yml")).CombinedOutput()
		require.NoError(t, err, "promtool check config: %s", out)
	} else if os.Getenv("CI") != "" {
		t.Fatal("promtool is missing in CI")
	}

	graf := svc("grafana")
	gm := mounts(graf)
	require.Equal(t, filepath.Join(root, "deploy/grafana/courier.json"), gm["/var/lib/grafana/dashboards/courier.json"])
	require.Equal(t, filepath.Join(root, "deploy/grafana/provisioning"), gm["/etc/grafana/provisioning"])
	var ds struct {
		Datasources []struct {
			Type      string `yaml:"type"`
			URL       string `yaml:"url"`
			IsDefault bool   `yaml:"isDefault"`
		} `yaml:"datasources"`
	}
	raw, err = os.ReadFile(filepath.Join(root, "deploy/grafana/provisioning/datasources/courier.yml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &ds))
	require.Len(t, ds.Datasources, 1)
	require.Equal(t, "prometheus", ds.Datasources[0].Type)
	require.True(t, ds.Datasources[0].IsDefault, "the dashboard's $datasource picks the default")
	require.True(t, slices.ContainsFunc(svc("prometheus").Ports, func(p types.ServicePortConfig) bool { return p.Target == 9090 }))
	require.Equal(t, "http://prometheus:9090", ds.Datasources[0].URL, "the prometheus service, by its name and port")
	var dash struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	raw, err = os.ReadFile(filepath.Join(root, "deploy/grafana/provisioning/dashboards/courier.yml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &dash))
	require.Len(t, dash.Providers, 1)
	require.Equal(t, "/var/lib/grafana/dashboards", dash.Providers[0].Options.Path, "the provider reads where the dashboard is mounted")
}
