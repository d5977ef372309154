package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// promtool finds Prometheus's promtool (Debian's prometheus package). Without it the test is
// skipped, except in CI (.ci/run installs it), where it fails.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatal("promtool is required in CI (.ci/run installs Debian's prometheus package)")
	}
	t.Skip("skipping: promtool is not on PATH (apt-get install prometheus)")
	return ""
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out)
	return string(out)
}

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTests struct {
	Tests []struct {
		Name          string `yaml:"name"`
		AlertRuleTest []struct {
			Alertname string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, v), path)
}

// The alert rules load (promtool check rules), their unit tests pass (promtool test rules),
// and every alert has a test in which it fires and one in which it stays quiet, and a runbook
// section in docs/operations.md.
func TestAlertRules(t *testing.T) {
	pt := promtool(t)
	dir := "prometheus"
	run(t, dir, pt, "check", "rules", "courier-rules.yml")
	run(t, dir, pt, "test", "rules", "courier-rules.test.yml")

	var rules ruleFile
	readYAML(t, filepath.Join(dir, "courier-rules.yml"), &rules)
	var tests ruleTests
	readYAML(t, filepath.Join(dir, "courier-rules.test.yml"), &tests)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	ops, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	require.NoError(t, err)
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			require.True(t, fires[r.Alert], "%s has a unit test in which it fires", r.Alert)
			require.True(t, quiet[r.Alert], "%s has a unit test in which it stays quiet", r.Alert)
			anchor := "#" + strings.ToLower(r.Alert)
			require.Equal(t, "docs/operations.md"+anchor, r.Annotations["runbook"], "%s links its runbook", r.Alert)
			require.True(t, strings.Contains(string(ops), "### "+r.Alert), "docs/operations.md explains %s under a heading of its name", r.Alert)
		}
	}
	require.GreaterOrEqual(t, n, 8)
}

type dashboard struct {
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []dashPanel `json:"panels"`
}

type dashPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos *struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

// DashboardExprs returns every PromQL expression of the dashboard, variables included.
func dashboardExprs(t *testing.T) (dashboard, []string) {
	raw, err := os.ReadFile(filepath.Join("grafana", "courier.json"))
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(raw, &d))
	var exprs []string
	var walk func(ps []dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				exprs = append(exprs, tg.Expr)
			}
		}
	}
	walk(d.Panels)
	return d, exprs
}

// grafanaVars replaces the dashboard's variables with values Prometheus parses.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$queue", ".*", "$source", ".*", "$biz_type", ".*")

// The dashboard is well formed for Grafana (unique panel ids, every panel on the datasource
// variable with at least one query), and every query parses as PromQL (promtool checks them as
// recording rules).
func TestGrafanaDashboard(t *testing.T) {
	d, exprs := dashboardExprs(t)
	require.Equal(t, "courier", d.UID)
	ids := map[int]bool{}
	var walk func(ps []dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			require.False(t, ids[p.ID], "panel id %d is unique", p.ID)
			ids[p.ID] = true
			require.NotNil(t, p.GridPos, "panel %q has a place", p.Title)
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			require.NotEmpty(t, p.Title)
			require.NotNil(t, p.Datasource, "panel %q names its datasource", p.Title)
			require.Equal(t, "${datasource}", p.Datasource.UID, "panel %q uses the datasource variable", p.Title)
			require.NotEmpty(t, p.Targets, "panel %q has a query", p.Title)
			for _, tg := range p.Targets {
				require.NotEmpty(t, tg.Expr, "panel %q", p.Title)
			}
		}
	}
	walk(d.Panels)
	require.GreaterOrEqual(t, len(exprs), 20)

	pt := promtool(t)
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		q, err := json.Marshal(grafanaVars.Replace(e))
		require.NoError(t, err)
		fmt.Fprintf(&b, "      - record: dashboard:query_%d\n        expr: %s\n", i, q)
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard.yml"), []byte(b.String()), 0o644))
	run(t, dir, pt, "check", "rules", "dashboard.yml")
}

// Every series the dashboard and the rules name is one courier exports: the same names as
// cmd/courier's TestDashboardAndRulesSeriesExist checks against a running courier, here
// against the metric declarations, so a typo fails without starting anything.
func TestDashboardAndRulesNameDeclaredMetrics(t *testing.T) {
	_, exprs := dashboardExprs(t)
	var rules ruleFile
	readYAML(t, filepath.Join("prometheus", "courier-rules.yml"), &rules)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	declared := map[string]bool{}
	decl := regexp.MustCompile(`"(courier_[a-z0-9_]+)"`)
	files, err := filepath.Glob(filepath.Join("..", "metrics", "*.go"))
	require.NoError(t, err)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range decl.FindAllStringSubmatch(string(raw), -1) {
			declared[m[1]] = true
		}
	}
	used := regexp.MustCompile(`\bcourier_[a-z0-9_]+`)
	for _, e := range exprs {
		for _, name := range used.FindAllString(e, -1) {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
			require.True(t, declared[name] || declared[base], "%s (in %q) is declared in metrics/", name, e)
		}
	}
}
