package dispatch

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
)

const bands = courier.PriorityBands

func shares(t *testing.T, c *Chooser, picks int, hasWork func(int) bool) [bands]float64 {
	var counts [bands]int
	for i := 0; i < picks; i++ {
		b, ok := c.Pick(hasWork)
		require.True(t, ok)
		counts[b-1]++
	}
	var out [bands]float64
	for i, n := range counts {
		out[i] = float64(n) / float64(picks)
	}
	return out
}

// Under saturation (every band has a backlog) each band's share over 10,000 picks is within
// ±5 % of its configured weight.
func TestSharesUnderSaturation(t *testing.T) {
	for _, w := range []courier.BandWeights{courier.DefaultBandWeights, {1, 1, 1, 1, 1}, {50, 1, 30, 1, 20}, {997, 1, 1, 1, 1000}} {
		got := shares(t, NewChooser(w), 10_000, func(int) bool { return true })
		total := 0
		for _, v := range w {
			total += v
		}
		for i := range w {
			want := float64(w[i]) / float64(total)
			require.InDelta(t, want, got[i], want*0.05+1e-9, "weights %v, band %d", w, i+1)
		}
	}
	// The default gives bands 1-3 about 80 %.
	got := shares(t, NewChooser(courier.DefaultBandWeights), 10_000, func(int) bool { return true })
	require.InDelta(t, 0.80, got[0]+got[1]+got[2], 0.01)
}

// An empty band's share goes to the others, in proportion to their weights.
func TestEmptyBandShareGoesToOthers(t *testing.T) {
	w := courier.DefaultBandWeights
	got := shares(t, NewChooser(w), 10_000, func(b int) bool { return b != 1 })
	require.Zero(t, got[0], "an empty band gets nothing")
	rest := w[1] + w[2] + w[3] + w[4]
	for i := 1; i < bands; i++ {
		want := float64(w[i]) / float64(rest)
		require.InDelta(t, want, got[i], want*0.05, "band %d", i+1)
	}
	// Only the lowest band has work: it gets every slot.
	got = shares(t, NewChooser(w), 1000, func(b int) bool { return b == 5 })
	require.Equal(t, 1.0, got[4])
}

func TestNoWorkAndNoStarvation(t *testing.T) {
	c := NewChooser(courier.DefaultBandWeights)
	_, ok := c.Pick(func(int) bool { return false })
	require.False(t, ok)
	// The lowest band is served at least once in every run of sum/weight picks.
	last, gap := -1, 0
	for i := 0; i < 1000; i++ {
		b, _ := c.Pick(func(int) bool { return true })
		if b == 5 {
			if last >= 0 {
				gap = max(gap, i-last)
			}
			last = i
		}
	}
	require.LessOrEqual(t, gap, 100/8+1)
}
