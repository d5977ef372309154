package ratelimit_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/internal/ratelimit"
)

// clock is a fake clock the tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

// A bucket admits its burst at once, then one request per 1/rate, and says how long the next
// token is away.
func TestTakeBurstThenRate(t *testing.T) {
	t.Parallel()
	c := newClock()
	b := ratelimit.New(c.now, 0)
	for i := 0; i < 3; i++ {
		ok, wait := b.Take("k", 2, 3)
		require.True(t, ok, "request %d is within the burst", i)
		require.Zero(t, wait)
	}
	ok, wait := b.Take("k", 2, 3)
	require.False(t, ok)
	require.Equal(t, 500*time.Millisecond, wait, "two tokens a second: the next is half a second away")

	c.advance(200 * time.Millisecond)
	ok, wait = b.Take("k", 2, 3)
	require.False(t, ok, "a refused request takes nothing")
	require.Equal(t, 300*time.Millisecond, wait)

	c.advance(300 * time.Millisecond)
	ok, _ = b.Take("k", 2, 3)
	require.True(t, ok)
	ok, _ = b.Take("k", 2, 3)
	require.False(t, ok, "one token refilled, one taken")

	c.advance(10 * time.Second)
	for i := 0; i < 3; i++ {
		ok, _ = b.Take("k", 2, 3)
		require.True(t, ok, "an idle bucket refills to its burst, no more")
	}
	ok, _ = b.Take("k", 2, 3)
	require.False(t, ok)
}

// Keys have their own buckets: one exhausted key does not touch another.
func TestTakeKeysAreIndependent(t *testing.T) {
	t.Parallel()
	c := newClock()
	b := ratelimit.New(c.now, 0)
	ok, _ := b.Take("flood", 1, 1)
	require.True(t, ok)
	ok, _ = b.Take("flood", 1, 1)
	require.False(t, ok)
	ok, _ = b.Take("quiet", 1, 1)
	require.True(t, ok)
}

// A rate of zero is unlimited; a changed rate or burst applies to the bucket as it stands.
func TestTakeUnlimitedAndChangedRate(t *testing.T) {
	t.Parallel()
	c := newClock()
	b := ratelimit.New(c.now, 0)
	for i := 0; i < 100; i++ {
		ok, _ := b.Take("k", 0, 0)
		require.True(t, ok)
	}
	require.Zero(t, b.Len(), "unlimited keys hold no bucket")

	ok, _ := b.Take("k", 1, 1)
	require.True(t, ok)
	ok, wait := b.Take("k", 1, 1)
	require.False(t, ok)
	require.Equal(t, time.Second, wait)
	// Raised to 10/s: the next token is 100 ms away, not a second.
	ok, wait = b.Take("k", 10, 1)
	require.False(t, ok)
	require.Equal(t, 100*time.Millisecond, wait)
	// A larger burst lets an idle bucket fill further from then on.
	ok, _ = b.Take("k", 10, 5)
	require.False(t, ok, "no time has passed")
	c.advance(time.Second)
	for i := 0; i < 5; i++ {
		ok, _ = b.Take("k", 10, 5)
		require.True(t, ok, "request %d", i)
	}
	ok, _ = b.Take("k", 10, 5)
	require.False(t, ok)
}

// The set is bounded: past the bound, idle (full) buckets go first, so a busy key keeps its
// debt; when none is idle, the least recently used goes.
func TestBucketsBounded(t *testing.T) {
	t.Parallel()
	c := newClock()
	b := ratelimit.New(c.now, 3)
	ok, _ := b.Take("busy", 0.001, 1)
	require.True(t, ok)
	for i := 0; i < 10; i++ {
		c.advance(time.Millisecond)
		ok, _ := b.Take(fmt.Sprintf("idle-%d", i), 1000, 1000) // refills at once: idle again
		require.True(t, ok)
		require.LessOrEqual(t, b.Len(), 3)
	}
	ok, _ = b.Take("busy", 0.001, 1)
	require.False(t, ok, "the busy key's bucket survived the churn")

	// No idle bucket: the least recently used one is dropped.
	b = ratelimit.New(c.now, 2)
	for _, k := range []string{"a", "b", "c"} {
		c.advance(time.Millisecond)
		ok, _ := b.Take(k, 0.001, 1)
		require.True(t, ok)
	}
	require.Equal(t, 2, b.Len())
	ok, _ = b.Take("c", 0.001, 1)
	require.False(t, ok, "c is still held")
	ok, _ = b.Take("b", 0.001, 1)
	require.False(t, ok, "b is still held")
}

// Concurrent takers never get more than the burst from one bucket.
func TestTakeConcurrent(t *testing.T) {
	t.Parallel()
	c := newClock()
	b := ratelimit.New(c.now, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, _ := b.Take("k", 1, 10); ok {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 10, admitted)
}
