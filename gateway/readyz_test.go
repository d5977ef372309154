package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/gateway"
)

// Each broker is its own optional readiness check: one that is down, or hangs, is reported
// without making the gateway unready and without spending the other checks' time; a required
// dependency that is down still does.
func TestReadinessReportsEachBroker(t *testing.T) {
	var dbDown atomic.Bool
	h := gateway.New(gateway.Config{}, gateway.Deps{Checks: []gateway.Check{
		{Name: "database", Probe: func(context.Context) error {
			if dbDown.Load() {
				return errors.New("connection refused")
			}
			return nil
		}},
		{Name: "mq:points", Optional: true, Probe: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
		// Answers at once, but only if it still has time: run after a hung probe it would not.
		{Name: "mq:coupons", Optional: true, Probe: func(ctx context.Context) error { return ctx.Err() }},
	}})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	get := func() (int, bool, map[string]string) {
		resp, err := http.Get(srv.URL + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		var body struct {
			Ready  bool              `json:"ready"`
			Checks map[string]string `json:"checks"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return resp.StatusCode, body.Ready, body.Checks
	}
	code, ready, checks := get()
	require.Equal(t, http.StatusOK, code)
	require.True(t, ready)
	require.Equal(t, map[string]string{"database": "ok", "mq:points": "down", "mq:coupons": "ok"}, checks)

	dbDown.Store(true)
	code, ready, checks = get()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.False(t, ready)
	require.Equal(t, "down", checks["database"])
}
