package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/courier-oss/courier/store"
)

// devInstance is a running courier dev on free ports with its admin key.
type devInstance struct {
	proc *devProc
	gw   string // the gateway's base URL
	key  string
	dir  string // the data dir
	nats string // the embedded NATS URL
}

func startDevInstance(t *testing.T, extra ...string) *devInstance {
	t.Helper()
	dir := t.TempDir()
	ports := map[string]int{"http": freePort(t), "temporal": freePort(t), "ui": freePort(t), "nats": freePort(t)}
	args := append([]string{"--data-dir", dir, "--http-port", strconv.Itoa(ports["http"]), "--temporal-port", strconv.Itoa(ports["temporal"]),
		"--ui-port", strconv.Itoa(ports["ui"]), "--nats-port", strconv.Itoa(ports["nats"]), "--shutdown-timeout", "5s"}, extra...)
	d := &devInstance{proc: startDev(t, args...), gw: fmt.Sprintf("http://127.0.0.1:%d", ports["http"]), dir: dir,
		nats: fmt.Sprintf("nats://127.0.0.1:%d", ports["nats"])}
	d.proc.waitAnswers(t, d.gw+"/healthz")
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "dev-api-key"))
		d.key = strings.TrimSpace(string(b))
		return err == nil && d.key != ""
	}, 30*time.Second, 50*time.Millisecond)
	return d
}

// deploySeries are the metric names and, per name, the label names the Grafana dashboard and
// the alert rules use (in selectors and in by/on clauses).
func deploySeries(t *testing.T) map[string]map[string]bool {
	t.Helper()
	var exprs []string
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "courier.json"))
	require.NoError(t, err)
	for _, m := range regexp.MustCompile(`"expr":\s*("(?:[^"\\]|\\.)*")`).FindAllSubmatch(raw, -1) {
		var e string
		require.NoError(t, json.Unmarshal(m[1], &e))
		exprs = append(exprs, e)
	}
	for _, m := range regexp.MustCompile(`label_values\((courier_[a-z0-9_]+), ([a-z_]+)\)`).FindAllSubmatch(raw, -1) {
		exprs = append(exprs, string(m[1])+"{"+string(m[2])+`=""}`)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	raw, err = os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus", "courier-rules.yml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	require.NotEmpty(t, exprs)
	out := map[string]map[string]bool{}
	name := regexp.MustCompile(`\b(courier_[a-z0-9_]+)(\{[^}]*\})?`)
	label := regexp.MustCompile(`([a-z_]+)\s*(?:=~|!~|!=|=)`)
	grouping := regexp.MustCompile(`\b(?:by|on)\s*\(([^)]*)\)`)
	for _, e := range exprs {
		for _, m := range name.FindAllStringSubmatch(e, -1) {
			if out[m[1]] == nil {
				out[m[1]] = map[string]bool{}
			}
			for _, l := range label.FindAllStringSubmatch(m[2], -1) {
				out[m[1]][l[1]] = true
			}
		}
		// A by or on clause's labels must exist on the series it groups or matches: those named
		// in the parenthesised expression that follows it.
		for _, g := range grouping.FindAllStringSubmatchIndex(e, -1) {
			inner := balancedAfter(e, g[1])
			for _, l := range strings.Split(e[g[2]:g[3]], ",") {
				l = strings.TrimSpace(l)
				for _, m := range name.FindAllStringSubmatch(inner, -1) {
					out[m[1]][l] = true
				}
			}
		}
	}
	return out
}

// balancedAfter is the parenthesised group that starts at the first '(' at or after i.
func balancedAfter(s string, i int) string {
	start := strings.IndexByte(s[i:], '(')
	if start < 0 {
		return ""
	}
	start += i
	depth := 0
	for j := start; j < len(s); j++ {
		switch s[j] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return s[start : j+1]
			}
		}
	}
	return s[start:]
}

// Every series the shipped dashboard and alert rules use exists in a real courier's /metrics,
// with the labels they use, after a little work of each kind: an outbox record sent and one
// dead, a timer delivered, a task pushed and finished, an insert refused by admission control,
// and a slot count the sweeper repairs. A renamed metric or label fails here.
func TestDashboardAndRulesSeriesExist(t *testing.T) {
	if testing.Short() {
		t.Skip("starts courier dev")
	}
	want := deploySeries(t)
	d := startDevInstance(t, "--task-sweep-every", "1s")
	gw, key := d.gw, d.key

	nc, err := nats.Connect(d.nats)
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	require.NoError(t, err)
	nc.Close()
	require.Equal(t, 201, httpJSON(t, "POST", gw+"/v1/outbox", key, map[string]any{"topic": "orders.created", "payload": 1}, nil))
	require.Equal(t, 201, httpJSON(t, "POST", gw+"/v1/outbox", key, map[string]any{"topic": "nowhere.created", "payload": 1}, nil))

	var callbacks atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { callbacks.Add(1) }))
	defer rcv.Close()
	require.Equal(t, 201, httpJSON(t, "PUT", gw+"/v1/biz-types/order.close", key, map[string]any{"delivery": "http", "callback_url": rcv.URL}, nil))
	require.Equal(t, 201, httpJSON(t, "POST", gw+"/v1/timers", key, map[string]any{"biz_type": "order.close", "biz_id": "o-1", "delay": "0s"}, nil))

	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var push struct {
			Attempt   int    `json:"attempt"`
			ResultURL string `json:"result_url"`
		}
		_ = json.NewDecoder(r.Body).Decode(&push)
		w.WriteHeader(http.StatusAccepted)
		go func() {
			req, _ := http.NewRequest("POST", push.ResultURL, strings.NewReader(fmt.Sprintf(`{"attempt":%d,"status":"success"}`, push.Attempt)))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}))
	defer worker.Close()
	require.Equal(t, 200, httpJSON(t, "PUT", gw+"/v1/queues/default", key, map[string]any{"push_url": worker.URL}, nil))
	require.Equal(t, 201, httpJSON(t, "POST", gw+"/v1/tasks", key, map[string]any{"task_id": "doc-1", "task_version": 1}, nil))

	// Admission control: a queue that takes one insert, then refuses.
	require.Equal(t, 201, httpJSON(t, "PUT", gw+"/v1/queues/limited", key, map[string]any{"insert_rate_per_second": 0.001, "insert_burst": 1}, nil))
	require.Equal(t, 201, httpJSON(t, "POST", gw+"/v1/tasks", key, map[string]any{"task_id": "l-1", "task_version": 1, "queue": "limited"}, nil))
	require.Equal(t, 429, httpJSON(t, "POST", gw+"/v1/tasks", key, map[string]any{"task_id": "l-2", "task_version": 1, "queue": "limited"}, nil))

	// A paused queue, for the pause gauges (courier_paused, courier_paused_since_seconds).
	require.Equal(t, 201, httpJSON(t, "POST", gw+"/v1/pauses", key, map[string]any{"kind": "queue", "name": "limited", "reason": "maintenance"}, nil))

	// A slot count that disagrees with the rows, as a hand edit leaves it: the sweeper repairs it.
	st, err := store.Open(t.Context(), "sqlite:"+filepath.Join(d.dir, "courier.db"))
	require.NoError(t, err)
	_, err = st.DB().NewRaw("UPDATE courier_task_queues SET in_flight = in_flight + 2 WHERE name = 'limited'").Exec(t.Context())
	require.NoError(t, err)
	require.NoError(t, st.Close())

	var families map[string]*dto.MetricFamily
	missing := func() []string {
		resp, err := http.Get(gw + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		p := expfmt.NewTextParser(model.UTF8Validation)
		families, err = p.TextToMetricFamilies(strings.NewReader(string(body)))
		require.NoError(t, err)
		var out []string
		for name, labels := range want {
			f := family(families, name)
			if f == nil || len(f.GetMetric()) == 0 {
				out = append(out, name)
				continue
			}
			for l := range labels {
				if !hasLabel(f, name, l) {
					out = append(out, name+"{"+l+"}")
				}
			}
		}
		slices.Sort(out)
		return out
	}
	var last []string
	assert.Eventually(t, func() bool {
		last = missing()
		return len(last) == 0
	}, 90*time.Second, 250*time.Millisecond, "every series and label the dashboard and the rules use is exported")
	require.Empty(t, last, "series or labels the dashboard or the rules use that /metrics lacks")
	require.Positive(t, callbacks.Load())
	t.Logf("%d series of the dashboard and the rules found in /metrics", len(want))
}

// family finds the metric family a series name belongs to: the name itself, or a histogram's
// _bucket, _sum or _count.
func family(fs map[string]*dto.MetricFamily, name string) *dto.MetricFamily {
	if f := fs[name]; f != nil {
		return f
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f := fs[base]; f != nil && f.GetType() == dto.MetricType_HISTOGRAM {
				return f
			}
		}
	}
	return nil
}

func hasLabel(f *dto.MetricFamily, name, label string) bool {
	if label == "instance" || label == "job" {
		return true // Prometheus attaches the target's labels to every series it scrapes
	}
	if label == "le" {
		return f.GetType() == dto.MetricType_HISTOGRAM && strings.HasSuffix(name, "_bucket")
	}
	for _, m := range f.GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				return true
			}
		}
	}
	return false
}
