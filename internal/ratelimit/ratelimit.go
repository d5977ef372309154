package ratelimit

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// DefaultMaxKeys bounds how many buckets a Buckets keeps when New is given no bound.
const DefaultMaxKeys = 10000

// Buckets is a set of token buckets by key. Its size is bounded: past the bound, a new key
// first evicts the buckets that are full again (idle ones, which lose nothing by going), then
// the least recently used. Safe for concurrent use.
type Buckets struct {
	mu      sync.Mutex
	now     func() time.Time
	max     int
	buckets map[string]*bucket
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

// New returns an empty set reading time from now (time.Now when nil) and keeping at most
// maxKeys buckets (DefaultMaxKeys when maxKeys < 1).
func New(now func() time.Time, maxKeys int) *Buckets {
	if now == nil {
		now = time.Now
	}
	if maxKeys < 1 {
		maxKeys = DefaultMaxKeys
	}
	return &Buckets{now: now, max: maxKeys, buckets: map[string]*bucket{}}
}

// Take takes one token from key's bucket, which refills perSecond tokens a second up to burst
// (at least 1). A new key starts with a full bucket; a changed rate or burst applies from now
// on, to the tokens the bucket holds. It reports whether a token was there and, if not, how
// long until one is. perSecond ≤ 0 is unlimited: Take always succeeds and forgets the key.
func (b *Buckets) Take(key string, perSecond float64, burst int) (ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if perSecond <= 0 || math.IsNaN(perSecond) {
		delete(b.buckets, key)
		return true, 0
	}
	burst = max(burst, 1)
	now := b.now()
	bk, found := b.buckets[key]
	if !found {
		if len(b.buckets) >= b.max {
			b.evict(now)
		}
		bk = &bucket{lim: rate.NewLimiter(rate.Limit(perSecond), burst)}
		b.buckets[key] = bk
	}
	if bk.lim.Limit() != rate.Limit(perSecond) {
		bk.lim.SetLimitAt(now, rate.Limit(perSecond))
	}
	if bk.lim.Burst() != burst {
		bk.lim.SetBurstAt(now, burst)
	}
	bk.seen = now
	if bk.lim.AllowN(now, 1) {
		return true, 0
	}
	missing := 1 - bk.lim.TokensAt(now)
	wait = time.Duration(math.Ceil(missing / perSecond * float64(time.Second)))
	return false, max(wait, time.Nanosecond)
}

// evict makes room for one bucket: every full (idle) bucket goes; if none is, the least
// recently used one does.
func (b *Buckets) evict(now time.Time) {
	var oldest string
	var oldestSeen time.Time
	for k, bk := range b.buckets {
		if bk.lim.TokensAt(now) >= float64(bk.lim.Burst()) {
			delete(b.buckets, k)
			continue
		}
		if oldest == "" || bk.seen.Before(oldestSeen) {
			oldest, oldestSeen = k, bk.seen
		}
	}
	if len(b.buckets) >= b.max && oldest != "" {
		delete(b.buckets, oldest)
	}
}

// Len is the number of buckets held.
func (b *Buckets) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buckets)
}
