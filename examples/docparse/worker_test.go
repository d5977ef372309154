package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/webhook"
)

const report = `{"name":"q3.txt","text":"Revenue grew.\fCosts fell sharply.\f\f"}`

// A push is accepted before any work is done; the worker heartbeats with the attempt and its
// key while it parses, then posts the result for that attempt.
func TestPushLeadsToHeartbeatsThenAResult(t *testing.T) {
	tw := newTestWorker(t, true)

	status, out := tw.push(t, tw.pushFor("doc-1", 3, report, "90ms"))
	require.Equal(t, http.StatusAccepted, status, out)
	require.Equal(t, true, out["accepted"])
	require.Equal(t, 1, tw.Running(), "202 came while the parse is still running")
	require.Empty(t, tw.courier.Calls("result"))

	for _, hb := range tw.waitCalls(t, "heartbeat", 2) {
		require.Equal(t, "Bearer "+testKey, hb.Auth)
		require.Equal(t, 3, hb.Attempt)
		require.Equal(t, "doc-1", hb.TaskID)
		require.Equal(t, "1", hb.Version)
	}

	tw.finishParsing()
	res := tw.waitCalls(t, "result", 1)[0]
	require.Equal(t, "Bearer "+testKey, res.Auth)
	require.Equal(t, "doc-1", res.TaskID)
	require.Equal(t, 3, res.Result.Attempt)
	require.Equal(t, courier.ResultSuccess, res.Result.Status)
	require.Equal(t, StatusParsed, res.Result.StatusCode)
	require.Equal(t, "parsed 2 pages, 5 words", res.Result.Message)
	require.JSONEq(t, `{"name":"q3.txt","pages":2,"words":5,"characters":35}`, string(res.Result.Result))

	tw.waitIdle(t)
	require.Len(t, tw.courier.Calls("result"), 1)
}

// Without a heartbeat timeout on the queue, the worker does not heartbeat.
func TestNoHeartbeatTimeoutMeansNoHeartbeats(t *testing.T) {
	tw := newTestWorker(t, false)
	status, _ := tw.push(t, tw.pushFor("doc-quiet", 1, `{"text":"hello"}`, ""))
	require.Equal(t, http.StatusAccepted, status)
	tw.finishParsing()
	res := tw.waitCalls(t, "result", 1)[0]
	require.Equal(t, "parsed 1 page, 1 word", res.Result.Message)
	tw.waitIdle(t)
	require.Empty(t, tw.courier.Calls("heartbeat"))
}

// A 409 on a heartbeat means the attempt timed out, was cancelled or superseded: the work stops
// and no result is posted.
func TestHeartbeatConflictStopsTheWorkWithoutAResult(t *testing.T) {
	tw := newTestWorker(t, false)
	tw.courier.heartbeat = func(n int) int {
		if n >= 2 {
			return http.StatusConflict
		}
		return http.StatusOK
	}
	status, _ := tw.push(t, tw.pushFor("doc-gone", 1, report, "60ms"))
	require.Equal(t, http.StatusAccepted, status)

	// The parse is never released: only the 409 can end it.
	tw.waitIdle(t)
	require.Len(t, tw.courier.Calls("heartbeat"), 2, "no heartbeat after the 409")
	require.Empty(t, tw.courier.Calls("result"))
}

// A payload that is not a document is accepted (202) and ends in a failure result that says
// why, so the task shows it.
func TestUnusablePayloadYieldsAFailureResult(t *testing.T) {
	tw := newTestWorker(t, false)
	for i, payload := range []string{`null`, `"just a string"`, `[1,2]`, `{}`, `{"name":"x.txt"}`, `{"text":"  \f \n"}`, `{"text":42}`} {
		t.Run(payload, func(t *testing.T) {
			id := "bad-" + string(rune('a'+i))
			status, _ := tw.push(t, tw.pushFor(id, 2, payload, "1s"))
			require.Equal(t, http.StatusAccepted, status)
			var res courierCall
			require.Eventually(t, func() bool {
				for _, c := range tw.courier.Calls("result") {
					if c.TaskID == id {
						res = c
						return true
					}
				}
				return false
			}, 5*time.Second, 5*time.Millisecond)
			require.Equal(t, 2, res.Result.Attempt)
			require.Equal(t, courier.ResultFailure, res.Result.Status)
			require.Equal(t, StatusUnusable, res.Result.StatusCode)
			require.Contains(t, res.Result.Message, "unusable payload")
			require.Empty(t, res.Result.Result)
		})
	}
	tw.waitIdle(t)
	require.Empty(t, tw.courier.Calls("heartbeat"), "failed before any work")
}

// With a secret, a push that is not signed by it, or is stale or altered, is 401 and starts
// nothing.
func TestBadlySignedPushIsRefused(t *testing.T) {
	tw := newTestWorker(t, true)
	body, err := json.Marshal(tw.pushFor("doc-signed", 1, report, ""))
	require.NoError(t, err)
	other, err := webhook.GenerateSecret()
	require.NoError(t, err)

	for name, headers := range map[string]func() http.Header{
		"unsigned": func() http.Header { return http.Header{} },
		"another secret": func() http.Header {
			h := http.Header{}
			tw.sign(t, other, h, body, time.Now())
			return h
		},
		"stale timestamp": func() http.Header {
			h := http.Header{}
			tw.sign(t, tw.secret, h, body, time.Now().Add(-time.Hour))
			return h
		},
		"other body": func() http.Header {
			h := http.Header{}
			tw.sign(t, tw.secret, h, []byte(`{"task_id":"something else"}`), time.Now())
			return h
		},
	} {
		status, out := tw.send(t, body, headers())
		require.Equal(t, http.StatusUnauthorized, status, "%s: %v", name, out)
	}
	require.Zero(t, tw.Running())

	// The genuine push still goes through.
	status, _ := tw.push(t, tw.pushFor("doc-signed", 1, report, ""))
	require.Equal(t, http.StatusAccepted, status)
	tw.finishParsing()
	tw.waitCalls(t, "result", 1)
}

// A body that is not a task push is 400 and starts nothing.
func TestMalformedPushIsRefused(t *testing.T) {
	tw := newTestWorker(t, false)
	valid := func(edit func(m map[string]any)) []byte {
		b, err := json.Marshal(tw.pushFor("doc-x", 1, report, "10s"))
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		edit(m)
		b, err = json.Marshal(m)
		require.NoError(t, err)
		return b
	}
	for name, body := range map[string][]byte{
		"not JSON":               []byte(`{"task_id":`),
		"a JSON array":           []byte(`[]`),
		"no task_id":             valid(func(m map[string]any) { delete(m, "task_id") }),
		"task_version 0":         valid(func(m map[string]any) { m["task_version"] = 0 }),
		"no attempt":             valid(func(m map[string]any) { delete(m, "attempt") }),
		"attempt as a string":    valid(func(m map[string]any) { m["attempt"] = "1" }),
		"result_url elsewhere":   valid(func(m map[string]any) { m["result_url"] = "http://attacker.example/collect" }),
		"no heartbeat_url":       valid(func(m map[string]any) { delete(m, "heartbeat_url") }),
		"bad heartbeat_timeout":  valid(func(m map[string]any) { m["heartbeat_timeout"] = "soon" }),
		"deadline not a time":    valid(func(m map[string]any) { m["deadline"] = "tomorrow" }),
		"result_url on https":    valid(func(m map[string]any) { m["result_url"] = "https://" + tw.courier.srv.Listener.Addr().String() + "/r" }),
		"negative heartbeat_tim": valid(func(m map[string]any) { m["heartbeat_timeout"] = "-1s" }),
	} {
		status, out := tw.send(t, body, nil)
		require.Equal(t, http.StatusBadRequest, status, "%s: %v", name, out)
		require.NotEmpty(t, out["error"], name)
	}

	resp, err := client.Get(tw.srv.URL + PushPath)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

	require.Zero(t, tw.Running())
	require.Empty(t, tw.courier.Calls(""))
}

// A second push of the running attempt starts nothing; a newer attempt of the same task
// version replaces the older one, whose work is dropped without a result.
func TestRepeatedAndNewerPushes(t *testing.T) {
	tw := newTestWorker(t, false)
	status, _ := tw.push(t, tw.pushFor("doc-dup", 1, report, ""))
	require.Equal(t, http.StatusAccepted, status)
	status, out := tw.push(t, tw.pushFor("doc-dup", 1, report, ""))
	require.Equal(t, http.StatusAccepted, status)
	require.Equal(t, true, out["duplicate"])
	require.Equal(t, 1, tw.Running())

	status, out = tw.push(t, tw.pushFor("doc-dup", 2, report, ""))
	require.Equal(t, http.StatusAccepted, status)
	require.Nil(t, out["duplicate"])
	require.Equal(t, 1, tw.Running())

	tw.finishParsing()
	tw.waitIdle(t)
	results := tw.courier.Calls("result")
	require.Len(t, results, 1)
	require.Equal(t, 2, results[0].Attempt)
}

// A result that meets a 5xx is retried; a 409 is not.
func TestResultRetriesOnlyTransientFailures(t *testing.T) {
	tw := newTestWorker(t, false)
	tw.courier.result = func(n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusAccepted
	}
	tw.finishParsing()
	status, _ := tw.push(t, tw.pushFor("doc-retry", 1, report, ""))
	require.Equal(t, http.StatusAccepted, status)
	tw.waitIdle(t)
	results := tw.courier.Calls("result")
	require.Len(t, results, 2)
	require.Equal(t, results[0].Result, results[1].Result, "the same result again")

	tw.courier.result = func(int) int { return http.StatusConflict }
	status, _ = tw.push(t, tw.pushFor("doc-late", 1, report, ""))
	require.Equal(t, http.StatusAccepted, status)
	tw.waitIdle(t)
	require.Len(t, tw.courier.Calls("result"), 3, "a 409 is final")
}

// Stopping waits for running parses until its context ends, then cancels them; each reports a
// failure so courier retries it. After Stop, pushes are refused with 503.
func TestStopReportsAFailureForUnfinishedWork(t *testing.T) {
	tw := newTestWorker(t, false)
	status, _ := tw.push(t, tw.pushFor("doc-stop", 4, report, "1s"))
	require.Equal(t, http.StatusAccepted, status)

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no drain time: cancel at once
	tw.Stop(ctx)
	require.Zero(t, tw.Running())
	results := tw.courier.Calls("result")
	require.Len(t, results, 1)
	require.Equal(t, 4, results[0].Attempt)
	require.Equal(t, courier.ResultFailure, results[0].Result.Status)
	require.Equal(t, StatusStopped, results[0].Result.StatusCode)

	status, _ = tw.push(t, tw.pushFor("doc-after", 1, report, ""))
	require.Equal(t, http.StatusServiceUnavailable, status)
}

// Stopping lets a parse that finishes within the drain time report its success.
func TestStopWaitsForWorkThatFinishes(t *testing.T) {
	tw := newTestWorker(t, false)
	status, _ := tw.push(t, tw.pushFor("doc-drain", 1, report, ""))
	require.Equal(t, http.StatusAccepted, status)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		tw.Stop(ctx)
		close(stopped)
	}()
	require.Eventually(t, func() bool {
		tw.mu.Lock()
		defer tw.mu.Unlock()
		return tw.closing
	}, 5*time.Second, 5*time.Millisecond)
	status, _ = tw.push(t, tw.pushFor("doc-late", 1, report, ""))
	require.Equal(t, http.StatusServiceUnavailable, status, "Stop refuses new pushes at once")
	require.Equal(t, 1, tw.Running(), "and waits for the running parse")
	tw.finishParsing()
	<-stopped
	results := tw.courier.Calls("result")
	require.Len(t, results, 1)
	require.Equal(t, courier.ResultSuccess, results[0].Result.Status)
}
