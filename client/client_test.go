package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// These tests pin the client's own rules (what is retried, how answers are read) against a
// scripted server; integration/client_test.go runs every call against the real gateway.

// fastRetry keeps the scripted retries quick.
var fastRetry = RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond, MaxElapsed: 5 * time.Second}

// scripted answers the n-th request (from 1) with answer(n) and counts them.
func scripted(t *testing.T, answer func(n int, w http.ResponseWriter)) (*Client, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		answer(int(n.Add(1)), w)
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, WithAPIKey("k"), WithRetry(fastRetry))
	require.NoError(t, err)
	return c, &n
}

func status(w http.ResponseWriter, code int, retryAfter string) {
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, `{"error":{"code":"`+string(api.CodeOfStatus(code))+`","message":"scripted"}}`)
}

func okTask(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"task_id":"t","task_version":1,"status":"pending"}`)
}

func TestIdempotentCallsAreRetriedOn503And429(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusBadGateway} {
		c, n := scripted(t, func(n int, w http.ResponseWriter) {
			if n < 3 {
				status(w, code, "")
				return
			}
			okTask(w)
		})
		task, err := c.GetTask(t.Context(), "t")
		require.NoError(t, err, code)
		require.Equal(t, courier.TaskPending, task.Status)
		require.EqualValues(t, 3, n.Load(), code)
	}
}

func TestRetriesAreBoundedByMaxAttempts(t *testing.T) {
	t.Parallel()
	c, n := scripted(t, func(_ int, w http.ResponseWriter) { status(w, http.StatusServiceUnavailable, "") })
	_, err := c.GetTask(t.Context(), "t")
	require.ErrorIs(t, err, ErrUnavailable)
	require.EqualValues(t, 3, n.Load())
}

// A call that is not idempotent is repeated only when the gateway certainly did nothing: 429.
func TestNonIdempotentCallsAreRetriedOnlyOn429(t *testing.T) {
	t.Parallel()
	c, n := scripted(t, func(_ int, w http.ResponseWriter) { status(w, http.StatusServiceUnavailable, "") })
	_, err := c.RedriveOutbox(t.Context(), "", 7)
	require.ErrorIs(t, err, ErrUnavailable)
	require.EqualValues(t, 1, n.Load(), "a redrive that may have happened is not repeated")

	c, n = scripted(t, func(n int, w http.ResponseWriter) {
		if n == 1 {
			status(w, http.StatusTooManyRequests, "")
			return
		}
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"id":7,"topic":"a.b","status":"pending"}`)
	})
	rec, err := c.RedriveOutbox(t.Context(), "", 7)
	require.NoError(t, err)
	require.EqualValues(t, 7, rec.ID)
	require.EqualValues(t, 2, n.Load())
}

// ReportResults is not repeated after a 503 (a repeat of a recorded result would be its 409);
// each answer reads as the error ReportResult would have returned; an answer that does not
// answer every result is an error, not a silent gap.
func TestReportResultsAnswersEachResult(t *testing.T) {
	t.Parallel()
	c, n := scripted(t, func(_ int, w http.ResponseWriter) { status(w, http.StatusServiceUnavailable, "") })
	items := []TaskResultItem{{TaskID: "a", TaskVersion: 1}, {TaskID: "b", TaskVersion: 2}}
	_, err := c.ReportResults(t.Context(), items)
	require.ErrorIs(t, err, ErrUnavailable)
	require.EqualValues(t, 1, n.Load())

	c, _ = scripted(t, func(_ int, w http.ResponseWriter) {
		_, _ = io.WriteString(w, `{"results":[{"task_id":"a","task_version":1,"attempt":1,"status":202},`+
			`{"task_id":"b","task_version":2,"attempt":3,"status":409,"error":{"code":"conflict","message":"over","details":{"status":"success"}}}]}`)
	})
	ans, err := c.ReportResults(t.Context(), items)
	require.NoError(t, err)
	require.NoError(t, ResultError(ans.Results[0]))
	e := ResultError(ans.Results[1])
	require.ErrorIs(t, e, ErrConflict)
	var ce *Error
	require.ErrorAs(t, e, &ce)
	require.Equal(t, http.StatusConflict, ce.StatusCode)
	require.Equal(t, "success", ce.Details["status"])
	require.Contains(t, ce.Error(), "/v1/tasks/b/versions/2/result")
	require.ErrorIs(t, ResultError(TaskResultAnswer{Status: http.StatusServiceUnavailable}), ErrUnavailable, "a code from the status alone")

	c, _ = scripted(t, func(_ int, w http.ResponseWriter) {
		_, _ = io.WriteString(w, `{"results":[{"task_id":"a","task_version":1,"attempt":1,"status":202}]}`)
	})
	_, err = c.ReportResults(t.Context(), items)
	require.ErrorContains(t, err, "1 answers to 2 results")
}

// Publish sends an Idempotency-Key, the same on every try, so it retries what may have
// happened (a 503, a lost answer) safely: the gateway answers the repeat with the record the
// first try wrote. Two publishes have two keys.
func TestPublishRetriesUnderOneIdempotencyKey(t *testing.T) {
	t.Parallel()
	var keys []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		n := len(keys)
		mu.Unlock()
		if n == 1 {
			status(w, http.StatusServiceUnavailable, "")
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"id":7,"topic":"a.b","status":"pending","outcome":"existing"}`)
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, WithRetry(fastRetry))
	require.NoError(t, err)
	rec, err := c.Publish(t.Context(), PublishRequest{Topic: "a.b", Payload: json.RawMessage(`1`)})
	require.NoError(t, err)
	require.Equal(t, "existing", rec.Outcome)
	_, err = c.Publish(t.Context(), PublishRequest{Topic: "a.b", Payload: json.RawMessage(`1`)})
	require.NoError(t, err)
	require.Len(t, keys, 3)
	require.NotEmpty(t, keys[0])
	require.Equal(t, keys[0], keys[1], "a retry repeats the key")
	require.NotEqual(t, keys[0], keys[2], "a new publish has a new key")

	_, err = c.PublishWithKey(t.Context(), "order-42", PublishRequest{Topic: "a.b", Payload: json.RawMessage(`1`)})
	require.NoError(t, err)
	require.Equal(t, "order-42", keys[3])
}

// Errors other than 429, 502, 503 and 504 are final.
func TestClientErrorsAreNotRetried(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusInternalServerError} {
		c, n := scripted(t, func(_ int, w http.ResponseWriter) { status(w, code, "") })
		_, err := c.GetTask(t.Context(), "t")
		var ae *Error
		require.ErrorAs(t, err, &ae)
		require.Equal(t, code, ae.StatusCode)
		require.EqualValues(t, 1, n.Load(), code)
	}
}

// A Retry-After longer than the budget left is not waited for: the error comes back at once
// with RetryAfter set, for the caller to decide.
func TestRetryAfterBeyondTheBudgetReturnsTheError(t *testing.T) {
	t.Parallel()
	c, n := scripted(t, func(_ int, w http.ResponseWriter) { status(w, http.StatusTooManyRequests, "3600") })
	_, err := c.GetTask(t.Context(), "t")
	var ae *Error
	require.ErrorAs(t, err, &ae)
	require.ErrorIs(t, err, ErrRateLimited)
	require.Equal(t, time.Hour, ae.RetryAfter)
	require.EqualValues(t, 1, n.Load())
}

// A context that ends stops the retries.
func TestContextEndsTheRetries(t *testing.T) {
	t.Parallel()
	c, n := scripted(t, func(_ int, w http.ResponseWriter) { status(w, http.StatusServiceUnavailable, "1") })
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := c.GetTask(ctx, "t")
	require.ErrorIs(t, err, ErrUnavailable)
	require.EqualValues(t, 1, n.Load(), "a 1 s Retry-After does not fit a 100 ms deadline")
}

// A connection that cannot be opened is retried for any call (the gateway never saw it); the
// error is not an *Error.
func TestRefusedConnectionIsRetried(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	var tries atomic.Int32
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		tries.Add(1)
		return http.DefaultTransport.RoundTrip(r)
	})}
	c, err := New("http://"+addr, WithHTTPClient(hc), WithRetry(fastRetry))
	require.NoError(t, err)
	_, err = c.Publish(t.Context(), PublishRequest{Topic: "a.b", Payload: json.RawMessage(`1`)})
	require.Error(t, err)
	var ae *Error
	require.False(t, errors.As(err, &ae))
	require.EqualValues(t, 3, tries.Load())
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestErrorFromAnswersWithoutCouriersShape(t *testing.T) {
	t.Parallel()
	c, _ := scripted(t, func(_ int, w http.ResponseWriter) {
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "<html>bad gateway</html>")
	})
	_, err := c.GetQueue(t.Context(), "q")
	var ae *Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, courier.CodeUnavailable, ae.Code)
	require.Contains(t, ae.Message, "bad gateway")
	require.Contains(t, err.Error(), "GET /v1/queues/q")
}

func TestErrorsMatchSentinelsAndCouriersErrors(t *testing.T) {
	t.Parallel()
	e := &Error{StatusCode: 404, Code: courier.CodeNotFound, Details: map[string]any{"field": "id"}}
	require.ErrorIs(t, e, ErrNotFound)
	require.ErrorIs(t, e, &courier.Error{Code: courier.CodeNotFound})
	require.NotErrorIs(t, e, ErrConflict)
	require.ErrorIs(t, e, &Error{Code: courier.CodeNotFound, StatusCode: 404})
	require.NotErrorIs(t, e, &Error{Code: courier.CodeNotFound, StatusCode: 400})
	require.Equal(t, "id", e.Field())
}

func TestRetryAfterHeader(t *testing.T) {
	t.Parallel()
	require.Equal(t, 3*time.Second, retryAfter("3"))
	require.Zero(t, retryAfter(""))
	require.Zero(t, retryAfter("-1"))
	require.Zero(t, retryAfter("soon"))
	at := time.Now().Add(time.Minute).UTC().Format(http.TimeFormat)
	require.InDelta(t, time.Minute.Seconds(), retryAfter(at).Seconds(), 2)
}

func TestNewRefusesBadBaseURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://x", "http://", "http://x/?a=b"} {
		_, err := New(u)
		require.Error(t, err, u)
	}
	c, err := New("http://127.0.0.1:8080/courier/")
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:8080/courier", c.BaseURL())
}

// The client speaks the conventions of docs/api.md: a schedule is created with PUT and
// If-None-Match: * (never replacing one) and put with PUT, schedules and timers page with
// limit, and a queue is deleted with DELETE.
func TestClientUsesTheCurrentVerbsAndNames(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("If-None-Match"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.Method {
		case http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		case http.MethodPut:
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"nightly"}`)
		default:
			_, _ = io.WriteString(w, `{"items":[]}`)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, WithAPIKey("k"), WithRetry(fastRetry))
	require.NoError(t, err)
	ctx := t.Context()
	_, err = c.CreateSchedule(ctx, "nightly", ScheduleSpec{BizType: "report", Cron: "0 2 * * *"})
	require.NoError(t, err)
	put, err := c.PutSchedule(ctx, "nightly", ScheduleSpec{BizType: "report", Cron: "0 2 * * *"})
	require.NoError(t, err)
	require.True(t, put.Created)
	paused := true
	_, err = c.ListSchedules(ctx, ScheduleQuery{BizType: "report", Paused: &paused, Limit: 5})
	require.NoError(t, err)
	_, err = c.ListTimers(ctx, TimerQuery{BizType: "report", Limit: 5})
	require.NoError(t, err)
	require.NoError(t, c.DeleteQueue(ctx, "old"))
	require.Equal(t, []string{
		"PUT /v1/schedules/nightly *",
		"PUT /v1/schedules/nightly ",
		"GET /v1/schedules?biz_type=report&limit=5&paused=true ",
		"GET /v1/timers?biz_type=report&limit=5 ",
		"DELETE /v1/queues/old ",
	}, got)
}
