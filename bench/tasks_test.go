package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
)

func TestBandSizes(t *testing.T) {
	t.Parallel()
	require.Equal(t, [5]int{400, 400, 400, 400, 400}, bandSizes(2000))
	require.Equal(t, [5]int{3, 2, 2, 2, 2}, bandSizes(11))
	require.Equal(t, [5]int{1, 1, 0, 0, 0}, bandSizes(2))
	var counts [5]int
	for i := range 13 {
		counts[taskPriority(i)-1]++
	}
	require.Equal(t, bandSizes(13), counts, "taskPriority and bandSizes agree")
}

func TestBacklogShares(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		order  []int
		sizes  [5]int
		shares [5]float64
		n      int
	}{
		{
			name:  "stops at the push that empties the first band",
			order: []int{1, 2, 1, 3, 4, 5, 1, 2, 2, 2},
			sizes: [5]int{3, 5, 5, 5, 5},
			// the third band-1 push is the seventh; the rest comes after band 1 ran out
			shares: [5]float64{300.0 / 7, 100.0 / 7, 100.0 / 7, 100.0 / 7, 100.0 / 7},
			n:      7,
		},
		{
			name:   "every push counts while no band runs out",
			order:  []int{1, 2, 3, 4},
			sizes:  [5]int{2, 2, 2, 2, 2},
			shares: [5]float64{25, 25, 25, 25, 0},
			n:      4,
		},
		{
			name:  "a band that starts empty leaves nothing to compare",
			order: []int{1, 2},
			sizes: [5]int{1, 1, 0, 0, 0},
		},
		{
			name:  "no pushes",
			sizes: [5]int{1, 1, 1, 1, 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			shares, n := backlogShares(tc.order, tc.sizes)
			require.Equal(t, tc.n, n)
			require.InDeltaSlice(t, tc.shares[:], shares[:], 1e-9)
		})
	}
}

func TestFormatShares(t *testing.T) {
	t.Parallel()
	require.Equal(t, "35/25/20/12/8", formatShares(weightShares(courier.DefaultBandWeights)))
	require.Equal(t, "20/20/20/20/20", formatShares(weightShares([5]int{1, 1, 1, 1, 1})))
}

func TestForEach(t *testing.T) {
	t.Parallel()
	var seen [100]atomic.Int32
	require.NoError(t, forEach(t.Context(), len(seen), 8, func(i int) error { seen[i].Add(1); return nil }))
	for i := range seen {
		require.EqualValues(t, 1, seen[i].Load(), "index %d", i)
	}

	boom := errors.New("boom")
	var calls atomic.Int32
	err := forEach(t.Context(), 1000, 4, func(i int) error {
		calls.Add(1)
		if i == 3 {
			return boom
		}
		return nil
	})
	require.ErrorIs(t, err, boom)
	require.Less(t, calls.Load(), int32(1000), "feeding stops after the error")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, forEach(ctx, 10, 2, func(int) error { return nil }), context.Canceled)
}
