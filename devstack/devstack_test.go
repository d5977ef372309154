package devstack_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier/devstack"
)

const taskQueue = "devstack-test"

var (
	keywordAttr = temporal.NewSearchAttributeKeyKeyword("CourierTestKW")
	intAttr     = temporal.NewSearchAttributeKeyInt64("CourierTestInt")
)

func greet(_ workflow.Context, name string) (string, error) {
	return "hello " + name, nil
}

func TestTemporalRestartKeepsState(t *testing.T) {
	dataDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	cfg := devstack.Config{
		DataDir:      dataDir,
		TemporalPort: -1,
		UIPort:       -1,
		SearchAttributes: map[string]enumspb.IndexedValueType{
			"CourierTestKW": enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		},
	}

	// First start: fresh database.
	tmp := start(t, ctx, cfg)
	if tmp.Namespace() != "courier" {
		t.Fatalf("Namespace() = %q, want courier", tmp.Namespace())
	}
	if _, err := os.Stat(filepath.Join(dataDir, "temporal.db")); err != nil {
		t.Fatalf("database file: %v", err)
	}
	c := dial(t, tmp)
	assertRetention(t, ctx, c, "courier", 7*24*time.Hour)
	assertSearchAttributes(t, ctx, c, "courier", map[string]enumspb.IndexedValueType{
		"CourierTestKW": enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	})

	w := worker.New(c, taskQueue, worker.Options{})
	w.RegisterWorkflow(greet)
	if err := w.Start(); err != nil {
		t.Fatalf("worker start: %v", err)
	}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                    "greet-1",
		TaskQueue:             taskQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(keywordAttr.ValueSet("first")),
	}, greet, "courier")
	if err != nil {
		t.Fatalf("start workflow: %v", err)
	}
	var result string
	if err := run.Get(ctx, &result); err != nil {
		t.Fatalf("workflow result: %v", err)
	}
	if result != "hello courier" {
		t.Fatalf("workflow result %q", result)
	}
	runID := run.GetRunID()
	assertUI(t, tmp.UIURL())
	// The workflow must be visible through the custom attribute before we
	// restart, so the restart check below is about persistence only.
	waitListed(t, ctx, c, "courier", "CourierTestKW = 'first'", "greet-1")

	w.Stop()
	c.Close()
	stopStart := time.Now()
	tmp.Stop()
	t.Logf("first Stop took %s", time.Since(stopStart))
	tmp.Stop() // idempotent

	// Second start: same directory, same config; nothing may be lost.
	tmp = start(t, ctx, cfg)
	c = dial(t, tmp)
	desc, err := c.DescribeWorkflowExecution(ctx, "greet-1", runID)
	if err != nil {
		t.Fatalf("describe workflow after restart: %v", err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("workflow status after restart = %s, want COMPLETED", st)
	}
	assertRetention(t, ctx, c, "courier", 7*24*time.Hour)
	assertSearchAttributes(t, ctx, c, "courier", map[string]enumspb.IndexedValueType{
		"CourierTestKW": enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	})
	waitListed(t, ctx, c, "courier", "CourierTestKW = 'first'", "greet-1")
	assertUI(t, tmp.UIURL())
	c.Close()
	tmp.Stop()

	// Third start: a changed config converges on an existing database — new
	// retention, one more search attribute (usable immediately), no UI.
	cfg.Retention = 48 * time.Hour
	cfg.DisableUI = true
	cfg.SearchAttributes["CourierTestInt"] = enumspb.INDEXED_VALUE_TYPE_INT
	tmp = start(t, ctx, cfg)
	defer tmp.Stop()
	if tmp.UIURL() != "" {
		t.Fatalf("UIURL() = %q with DisableUI", tmp.UIURL())
	}
	c = dial(t, tmp)
	defer c.Close()
	assertRetention(t, ctx, c, "courier", 48*time.Hour)
	assertSearchAttributes(t, ctx, c, "courier", map[string]enumspb.IndexedValueType{
		"CourierTestKW":  enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		"CourierTestInt": enumspb.INDEXED_VALUE_TYPE_INT,
	})
	w = worker.New(c, taskQueue, worker.Options{})
	w.RegisterWorkflow(greet)
	if err := w.Start(); err != nil {
		t.Fatalf("worker start: %v", err)
	}
	defer w.Stop()
	run, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:        "greet-2",
		TaskQueue: taskQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			keywordAttr.ValueSet("second"), intAttr.ValueSet(42)),
	}, greet, "again")
	if err != nil {
		t.Fatalf("start workflow with new search attribute: %v", err)
	}
	if err := run.Get(ctx, &result); err != nil {
		t.Fatalf("workflow result: %v", err)
	}
	waitListed(t, ctx, c, "courier", "CourierTestInt = 42", "greet-2")
}

func TestTemporalPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	addr := "127.0.0.1:" + strconv.Itoa(port)

	for _, tc := range []struct {
		name string
		cfg  devstack.Config
		want string
	}{
		{"frontend", devstack.Config{TemporalPort: port, UIPort: -1},
			"temporal: port " + addr + " is already in use (set --temporal-port)"},
		{"ui", devstack.Config{TemporalPort: -1, UIPort: port},
			"temporal ui: port " + addr + " is already in use (set --ui-port)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			tc.cfg.DataDir = dataDir
			begin := time.Now()
			tmp, err := devstack.StartTemporal(context.Background(), tc.cfg)
			if err == nil {
				tmp.Stop()
				t.Fatal("expected an error for a port that is already in use")
			}
			if err.Error() != tc.want {
				t.Fatalf("error = %q, want %q", err, tc.want)
			}
			// Nothing was started or created.
			if _, statErr := os.Stat(dataDir); !os.IsNotExist(statErr) {
				t.Fatalf("DataDir was touched before the port check failed: %v", statErr)
			}
			if d := time.Since(begin); d > 2*time.Second {
				t.Fatalf("port check took %s", d)
			}
		})
	}
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  devstack.Config
		want string
	}{
		{"no data dir", devstack.Config{}, "DataDir is required"},
		{"short retention", devstack.Config{DataDir: t.TempDir(), Retention: time.Hour}, "below the minimum"},
		{"bad port", devstack.Config{DataDir: t.TempDir(), TemporalPort: 70000}, "invalid TemporalPort"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := devstack.StartTemporal(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func start(t *testing.T, ctx context.Context, cfg devstack.Config) *devstack.Temporal {
	t.Helper()
	begin := time.Now()
	tmp, err := devstack.StartTemporal(ctx, cfg)
	if err != nil {
		t.Fatalf("StartTemporal: %v", err)
	}
	t.Logf("StartTemporal took %s (frontend %s, UI %q)", time.Since(begin), tmp.Address(), tmp.UIURL())
	return tmp
}

func dial(t *testing.T, tmp *devstack.Temporal) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{
		HostPort:  tmp.Address(),
		Namespace: tmp.Namespace(),
		Logger:    sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	})
	if err != nil {
		t.Fatalf("dial %s: %v", tmp.Address(), err)
	}
	return c
}

func assertRetention(t *testing.T, ctx context.Context, c client.Client, ns string, want time.Duration) {
	t.Helper()
	resp, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: ns})
	if err != nil {
		t.Fatalf("describe namespace %q: %v", ns, err)
	}
	if got := resp.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration(); got != want {
		t.Fatalf("retention of %q = %s, want %s", ns, got, want)
	}
}

func assertSearchAttributes(t *testing.T, ctx context.Context, c client.Client, ns string, want map[string]enumspb.IndexedValueType) {
	t.Helper()
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		t.Fatalf("list search attributes: %v", err)
	}
	for name, typ := range want {
		if got, ok := resp.GetCustomAttributes()[name]; !ok || got != typ {
			t.Fatalf("search attribute %s = %v (present %v), want %v; have %v", name, got, ok, typ, resp.GetCustomAttributes())
		}
	}
}

func waitListed(t *testing.T, ctx context.Context, c client.Client, ns, query, workflowID string) {
	t.Helper()
	listed := func() bool {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: ns, Query: query})
		if err != nil {
			t.Fatalf("list workflows %q: %v", query, err)
		}
		for _, e := range resp.GetExecutions() {
			if e.GetExecution().GetWorkflowId() == workflowID {
				return true
			}
		}
		return false
	}
	// Visibility is eventually consistent: wait on the condition, bounded.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(15 * time.Second)
	for !listed() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("workflow %s not listed by %q", workflowID, query)
		}
	}
}

func assertUI(t *testing.T, url string) {
	t.Helper()
	if url == "" {
		t.Fatal("UIURL() is empty")
	}
	resp, err := http.Get(url + "/")
	if err != nil {
		t.Fatalf("GET %s/: %v", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/: %s", url, resp.Status)
	}
}
