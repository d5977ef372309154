package health_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/health"
)

// A required check that fails makes the report unready, an optional one only reports itself
// down; a check that hangs is cut off without spending the others' time.
func TestEvaluate(t *testing.T) {
	down := errors.New("dial tcp 10.0.0.5:5432: connection refused")
	r := health.Evaluate(t.Context(), []health.Check{
		{Name: "database", Probe: func(context.Context) error { return nil }},
		{Name: "mq:points", Optional: true, Probe: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
		{Name: "mq:coupons", Optional: true, Probe: func(ctx context.Context) error { return ctx.Err() }},
	})
	require.True(t, r.Ready)
	require.Equal(t, map[string]string{"database": "ok", "mq:points": "down", "mq:coupons": "ok"}, r.Checks)

	r = health.Evaluate(t.Context(), []health.Check{
		{Name: "database", Probe: func(context.Context) error { return down }},
		{Name: "temporal", Probe: func(context.Context) error { return nil }},
	})
	require.False(t, r.Ready)
	require.Equal(t, "down", r.Checks["database"])
	require.ErrorIs(t, r.Errors["database"], down)
	require.Empty(t, health.Evaluate(t.Context(), nil).Checks)
	require.True(t, health.Evaluate(t.Context(), nil).Ready)
}

// A loop is stale once it has gone StaleIntervals of its interval without a completed pass,
// and fresh again at its next one; a loop whose turns fail is stale but not wedged; one that
// ends no turn for WedgedAfter is wedged.
func TestLoop(t *testing.T) {
	now := time.Unix(1_000, 0)
	clock := func() time.Time { return now }
	l := health.NewLoop("relay:default", time.Second, clock)
	require.Equal(t, "loop:relay:default", l.Check().Name)
	require.NoError(t, l.Stale(), "a new loop is not stale")

	now = now.Add(health.StaleIntervals * time.Second)
	require.NoError(t, l.Stale(), "exactly five intervals is still in time")
	now = now.Add(time.Millisecond)
	require.Error(t, l.Stale())
	require.Error(t, l.Check().Probe(t.Context()))

	l.Turned(false) // the claim failed: still stale, but turning
	require.Error(t, l.Stale())
	now = now.Add(health.WedgedAfter)
	l.Turned(false)
	require.NoError(t, l.Wedged())
	require.NoError(t, health.Live([]*health.Loop{l}))

	l.Turned(true)
	require.NoError(t, l.Stale())
	require.Zero(t, l.SincePass())

	now = now.Add(health.WedgedAfter + time.Second)
	require.Error(t, l.Wedged())
	require.ErrorContains(t, health.Live([]*health.Loop{l}), "relay:default")
}
