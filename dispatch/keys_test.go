package dispatch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
)

func candidates(key string, n int, from time.Time) []KeyCandidate {
	out := make([]KeyCandidate, n)
	for i := range out {
		out[i] = KeyCandidate{TaskID: key, Version: int64(i + 1), Key: key, CreatedAt: from.Add(time.Duration(i) * time.Second)}
	}
	return out
}

func keysOf(c []KeyCandidate) []string {
	out := make([]string, len(c))
	for i := range c {
		out[i] = c[i].Key
	}
	return out
}

// The turns: fewest held for the weight first, then the oldest next task; the per-key limit
// skips a key, never the unkeyed group.
func TestPickTurns(t *testing.T) {
	t0 := time.Now()
	var c []KeyCandidate
	c = append(c, candidates("", 3, t0.Add(3*time.Second))...)
	c = append(c, candidates("a", 10, t0)...)
	c = append(c, candidates("b", 10, t0.Add(time.Second))...)
	q := courier.Queue{PerKeyLimit: 2}
	require.Equal(t, []string{"", "a", "b", "", ""}, keysOf(pickTurns(q, c, 10, map[string]int{"a": 1, "b": 1})),
		"a and b take one each up to their limit; the unkeyed group is not capped")

	q = courier.Queue{FairKeys: true, KeyWeights: map[string]int{"a": 2}}
	got := keysOf(pickTurns(q, c[3:], 6, nil))
	require.Equal(t, []string{"a", "b", "a", "a", "b", "a"}, got, "a holds twice b's slots")
}
