package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier/webhook"
)

// The test binary doubles as the courier binary: with COURIER_AS_MAIN=1 it runs main() on the
// arguments after "--".
func TestMain(m *testing.M) {
	if os.Getenv("COURIER_AS_MAIN") == "1" {
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"courier"}, os.Args[i+1:]...)
				break
			}
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type devProc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
}

// syncBuffer is the process's output, written by exec's copier while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func startDev(t *testing.T, args ...string) *devProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--", "dev"}, args...)...)
	cmd.Env = append(os.Environ(), "COURIER_AS_MAIN=1")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	p := &devProc{cmd: cmd, out: out, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

// waitAnswers waits until url answers 200, and fails at once if courier dev exits first.
func (p *devProc) waitAnswers(t *testing.T, url string) {
	t.Helper()
	exited := false
	var exitErr error
	require.Eventually(t, func() bool {
		select {
		case exitErr = <-p.done:
			p.done <- exitErr // the cleanup waits on it too
			exited = true
			return true
		default:
		}
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 3*time.Minute, 100*time.Millisecond, "%s answers 200", url)
	if exited {
		t.Fatalf("courier dev exited early: %v\n%s", exitErr, p.out)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func httpJSON(t *testing.T, method, url, key string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if out != nil {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
	}
	return resp.StatusCode
}

// courier dev end to end: starts, serves the gateway and the Temporal UI, delivers, refuses a
// second copy on taken ports with one clear line, exits 0 on SIGTERM, and after a restart on
// the same data dir every sent and dead record, the API key, the workflow history and the
// broker's messages are still there.
func TestDevRunsStopsAndRestartsWithoutLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded Temporal server")
	}
	dir := t.TempDir()
	ports := map[string]int{"http": freePort(t), "temporal": freePort(t), "ui": freePort(t), "nats": freePort(t)}
	args := []string{"--data-dir", dir, "--http-port", strconv.Itoa(ports["http"]), "--temporal-port", strconv.Itoa(ports["temporal"]),
		"--ui-port", strconv.Itoa(ports["ui"]), "--nats-port", strconv.Itoa(ports["nats"]), "--shutdown-timeout", "5s"}
	gw := fmt.Sprintf("http://127.0.0.1:%d", ports["http"])
	waitUp := func(p *devProc) { p.waitAnswers(t, gw+"/healthz") }

	p := startDev(t, args...)
	waitUp(p)
	// The banner follows the gateway's first answer by a moment.
	require.Eventually(t, func() bool { return strings.Contains(p.out.String(), "API key") }, 30*time.Second, 50*time.Millisecond)
	keyB, err := os.ReadFile(filepath.Join(dir, "dev-api-key"))
	require.NoError(t, err)
	key := strings.TrimSpace(string(keyB))
	require.Contains(t, p.out.String(), key, "the key is printed")

	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", ports["ui"]))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, "the Temporal UI serves")

	var ready map[string]any
	require.Equal(t, 200, httpJSON(t, "GET", gw+"/readyz", "", nil, &ready))

	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", ports["nats"]))
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	nc.Close()

	type rec struct {
		ID     int64  `json:"id"`
		Status string `json:"status"`
	}
	var sent, dead rec
	require.Equal(t, 201, httpJSON(t, "POST", gw+"/v1/outbox", key, map[string]any{"topic": "orders.created", "payload": map[string]int{"order": 1}}, &sent))
	require.Equal(t, 201, httpJSON(t, "POST", gw+"/v1/outbox", key, map[string]any{"topic": "nowhere.created", "payload": 1}, &dead))
	waitStatus := func(id int64, want string) {
		require.Eventually(t, func() bool {
			var r rec
			httpJSON(t, "GET", fmt.Sprintf("%s/v1/outbox/%d", gw, id), key, nil, &r)
			return r.Status == want
		}, time.Minute, 50*time.Millisecond, "record %d becomes %s", id, want)
	}
	waitStatus(sent.ID, "sent")
	waitStatus(dead.ID, "dead")

	// A timer through the dev stack: a business type whose callback is this test (dev mode lets
	// callbacks reach loopback), then a timer due in a second.
	var callbacks atomic.Int64
	var verifier *webhook.Verifier
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if verifier != nil && verifier.Verify(body, r.Header) == nil {
			callbacks.Add(1)
		}
	}))
	defer rcv.Close()
	var bt struct {
		GeneratedSecret string `json:"generated_secret"`
	}
	require.Equal(t, 201, httpJSON(t, "PUT", gw+"/v1/biz-types/order.close", key, map[string]any{"delivery": "http", "callback_url": rcv.URL}, &bt))
	verifier, err = webhook.NewVerifier(bt.GeneratedSecret)
	require.NoError(t, err)
	require.Equal(t, 201, httpJSON(t, "POST", gw+"/v1/timers", key, map[string]any{"biz_type": "order.close", "biz_id": "o-1", "delay": "1s", "payload": map[string]string{"order": "o-1"}}, nil))
	require.Eventually(t, func() bool { return callbacks.Load() == 1 }, time.Minute, 50*time.Millisecond, "the timer fires with a valid signature")

	// A task through the dev stack: the default queue pushes to this test's worker (loopback is
	// allowed in dev), which posts its result to the link in the push.
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var push struct {
			Attempt   int    `json:"attempt"`
			ResultURL string `json:"result_url"`
		}
		if err := json.NewDecoder(r.Body).Decode(&push); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		go func() {
			body := fmt.Sprintf(`{"attempt":%d,"status":"success","result":{"pages":2}}`, push.Attempt)
			req, _ := http.NewRequest("POST", push.ResultURL, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}))
	defer worker.Close()
	require.Equal(t, 200, httpJSON(t, "PUT", gw+"/v1/queues/default", key, map[string]any{"push_url": worker.URL}, nil))
	require.Equal(t, 201, httpJSON(t, "POST", gw+"/v1/tasks", key, map[string]any{"task_id": "doc-1", "task_version": 1, "payload": map[string]string{"file": "a.pdf"}}, nil))
	require.Eventually(t, func() bool {
		var task struct {
			Status string          `json:"status"`
			Result json.RawMessage `json:"result"`
		}
		httpJSON(t, "GET", gw+"/v1/tasks/doc-1", key, nil, &task)
		return task.Status == "success" && string(task.Result) == `{"pages":2}`
	}, time.Minute, 50*time.Millisecond, "the task is pushed and its result recorded")

	// Metrics: the table gauges, the delivery counters and histogram, and the SDK's own. The
	// result counter moves just after the result is stored, so read until all are there.
	wants := []string{
		`courier_outbox_rows{source="default",status="sent"} 1`,
		`courier_outbox_rows{source="default",status="dead"} 1`,
		`courier_outbox_oldest_unsent_age_seconds{source="default"} 0`,
		`courier_outbox_published_total{source="default",topic="orders.created"} 1`,
		`courier_outbox_dead_total{source="default",topic="nowhere.created"} 1`,
		`courier_outbox_commit_to_publish_seconds_count{source="default"} 1`,
		`temporal_request`,
		`courier_timer_deliveries_total{biz_type="order.close",outcome="delivered"} 1`,
		`courier_timer_fire_lateness_seconds_count{biz_type="order.close"} 1`,
		`courier_tasks{queue="default",status="success"} 1`,
		`courier_task_slots_in_use{queue="default"} 0`,
		`courier_task_slots_limit{queue="default"} 10`,
		`courier_task_results_total{outcome="success",queue="default"} 1`,
		`courier_task_insert_to_push_seconds_count{queue="default"} 1`,
	}
	var mbody []byte
	require.Eventually(t, func() bool {
		mresp, err := http.Get(gw + "/metrics")
		require.NoError(t, err)
		mbody, _ = io.ReadAll(mresp.Body)
		mresp.Body.Close()
		for _, want := range wants {
			if !strings.Contains(string(mbody), want) {
				return false
			}
		}
		return true
	}, 10*time.Second, 100*time.Millisecond, "every metric is exported")
	for _, want := range wants {
		require.Contains(t, string(mbody), want)
	}

	// A second copy on the same ports says which port is taken, in one line, and fails.
	second := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--", "dev"}, append(args[:0:0], append([]string{"--data-dir", t.TempDir()}, args[2:]...)...)...)...)
	second.Env = append(os.Environ(), "COURIER_AS_MAIN=1")
	out, err := second.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "is already in use")

	// SIGTERM: clean stop, exit 0.
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.done:
		require.NoError(t, err, "exit status 0 on SIGTERM\n%s", p.out)
		p.done <- nil
	case <-time.After(60 * time.Second):
		t.Fatalf("courier dev did not stop within 60s of SIGTERM\n%s", p.out)
	}

	// Restart on the same data dir: nothing is lost.
	p2 := startDev(t, args...)
	waitUp(p2)
	var r rec
	require.Equal(t, 200, httpJSON(t, "GET", fmt.Sprintf("%s/v1/outbox/%d", gw, sent.ID), key, nil, &r), "the API key survives")
	require.Equal(t, "sent", r.Status)
	require.Equal(t, 200, httpJSON(t, "GET", fmt.Sprintf("%s/v1/outbox/%d", gw, dead.ID), key, nil, &r))
	require.Equal(t, "dead", r.Status)

	tc, err := client.Dial(client.Options{HostPort: fmt.Sprintf("127.0.0.1:%d", ports["temporal"]), Namespace: "courier"})
	require.NoError(t, err)
	defer tc.Close()
	d, err := tc.DescribeWorkflowExecution(t.Context(), fmt.Sprintf("outbox/%d", sent.ID), "")
	require.NoError(t, err, "the delivery workflow is still in Temporal")
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, d.GetWorkflowExecutionInfo().GetStatus())

	nc, err = nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", ports["nats"]))
	require.NoError(t, err)
	defer nc.Close()
	js, err = jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(t.Context(), "ORDERS")
	require.NoError(t, err)
	info, err := st.Info(t.Context())
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs, "the published message survives the restart")

	var tm struct {
		State string `json:"state"`
	}
	require.Equal(t, 200, httpJSON(t, "GET", gw+"/v1/timers/order.close/o-1", key, nil, &tm))
	require.Equal(t, "delivered", tm.State, "the timer's outcome survives the restart")
	require.Eventually(t, func() bool {
		resp, err := http.Get(gw + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `courier_timers{state="delivered"} 1`)
	}, 30*time.Second, 200*time.Millisecond, "timers are counted by state")

	// The dead record can be redriven after the stream for its topic exists.
	_, err = js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "NOWHERE", Subjects: []string{"nowhere.>"}})
	require.NoError(t, err)
	require.Equal(t, 202, httpJSON(t, "POST", fmt.Sprintf("%s/v1/outbox/%d/redrive", gw, dead.ID), key, nil, nil))
	waitStatus(dead.ID, "sent")
}
