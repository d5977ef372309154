package store

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/lib/pq"

	"github.com/courier-oss/courier"
)

// bizTypesChannel is the PostgreSQL channel every change of a business type is announced on
// (the payload is its name), at the commit of the change.
const bizTypesChannel = "courier_biz_types"

// DefaultBizTypeCacheMaxAge bounds how long BizTypeCache serves an entry without reading it
// again. Changes made through a Store reach every cache long before (see BizTypeCache); the
// bound is for what bypasses it: a row edited with SQL, another process writing the same
// SQLite file.
const DefaultBizTypeCacheMaxAge = 30 * time.Second

// BizTypeCache serves business types from memory, so a timer's fire and its delivery do not
// read the database each time. An entry is dropped when the type changes:
//   - through the Store it wraps (this process): before PutBizType or DeleteBizType returns;
//   - through another process on PostgreSQL: when that commit's notification arrives on the
//     cache's LISTEN connection (milliseconds). While that connection is down, and until its
//     LISTEN has taken effect, the cache keeps nothing and every read goes to the database;
//     a reconnect empties it, as notifications sent meanwhile are lost;
//   - otherwise: after its max age.
//
// Errors, including not_found, are never cached.
type BizTypeCache struct {
	s      *Store
	maxAge time.Duration

	mu sync.Mutex
	// gen counts invalidations: a read that started before one is not kept, as it may have
	// read the row as it was before the change.
	gen     uint64
	entries map[string]cachedBizType
	// On PostgreSQL entries are kept only while the change listener's connection is up and
	// its LISTEN has taken effect.
	connected, listening bool
	pingMissed           bool // the listener's connection did not answer its last ping in time

	unwatch, stopListen func()
}

type cachedBizType struct {
	b  courier.BizType
	at time.Time
}

// NewBizTypeCache builds a cache over s's business types; maxAge ≤ 0 means
// DefaultBizTypeCacheMaxAge. On PostgreSQL it listens for changes on a connection of its own
// until Close. log may be nil.
func (s *Store) NewBizTypeCache(maxAge time.Duration, log *slog.Logger) *BizTypeCache {
	if maxAge <= 0 {
		maxAge = DefaultBizTypeCacheMaxAge
	}
	if log == nil {
		log = slog.Default()
	}
	c := &BizTypeCache{s: s, maxAge: maxAge, entries: map[string]cachedBizType{}}
	c.unwatch = s.watchBizTypes(c.invalidate)
	if s.pg {
		c.stopListen = c.listen(log)
	}
	return c
}

// GetBizType returns one business type, from memory when it may.
func (c *BizTypeCache) GetBizType(ctx context.Context, name string) (courier.BizType, error) {
	c.mu.Lock()
	e, ok := c.entries[name]
	if ok && time.Since(e.at) < c.maxAge {
		c.mu.Unlock()
		return e.b, nil
	}
	gen, at := c.gen, time.Now()
	c.mu.Unlock()
	b, err := c.s.GetBizType(ctx, name)
	if err != nil {
		return b, err
	}
	c.mu.Lock()
	if c.gen == gen && c.keeps() {
		c.entries[name] = cachedBizType{b: b, at: at}
	}
	c.mu.Unlock()
	return b, nil
}

// ListBizTypes reads every business type from the database (it is not cached: the worker lists
// them only to start and stop their delivery workers).
func (c *BizTypeCache) ListBizTypes(ctx context.Context) ([]courier.BizType, error) {
	return c.s.ListBizTypes(ctx)
}

// Close stops listening for changes.
func (c *BizTypeCache) Close() error {
	c.unwatch()
	if c.stopListen != nil {
		c.stopListen()
	}
	return nil
}

// Keeps reports whether the cache keeps what it reads: always on SQLite; on PostgreSQL while
// its change listener is connected and listening.
func (c *BizTypeCache) Keeps() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.keeps()
}

// keeps is Keeps with c.mu held.
func (c *BizTypeCache) keeps() bool {
	return !c.s.pg || (c.connected && c.listening && !c.pingMissed)
}

// invalidate forgets every entry.
func (c *BizTypeCache) invalidate() {
	c.set(func() {})
}

// set forgets every entry and applies change (to the listener's state) under the lock.
func (c *BizTypeCache) set(change func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.entries)
	change()
}

// The change listener pings its connection this often, and takes an answer later than the
// timeout for a lost connection: lib/pq notices a connection that died silently only when it
// next uses it, and until then the cache would keep entries whose changes it cannot hear.
const (
	bizTypePingEvery   = 5 * time.Second
	bizTypePingTimeout = 2 * time.Second
)

// listen follows the change notifications of other processes. lib/pq's listener reconnects by
// itself and re-issues LISTEN before it reports the reconnect.
func (c *BizTypeCache) listen(log *slog.Logger) (stop func()) {
	l := pq.NewListener(c.s.url, 200*time.Millisecond, 10*time.Second, func(ev pq.ListenerEventType, err error) {
		switch ev {
		case pq.ListenerEventConnected, pq.ListenerEventReconnected:
			c.set(func() { c.connected = true })
		case pq.ListenerEventDisconnected, pq.ListenerEventConnectionAttemptFailed:
			log.Debug("business type listener down; reading from the database", "error", err)
			c.set(func() { c.connected = false })
		}
	})
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		// Listen returns once a connection is up and listening, or the listener is closed. It
		// takes no context: an unreachable database must not hold up Close.
		listened := make(chan error, 1)
		go func() { listened <- l.Listen(bizTypesChannel) }()
		select {
		case err := <-listened:
			switch {
			case err == nil:
				c.set(func() { c.listening = true })
			case !errors.Is(err, net.ErrClosed):
				// Nothing is kept (listening stays false); the notifications below are drained.
				log.Warn("LISTEN failed; business types are read from the database on every use", "channel", bizTypesChannel, "error", err)
			}
		case <-quit:
			return
		}
		ping := time.NewTicker(bizTypePingEvery)
		defer ping.Stop()
		for {
			select {
			case <-quit:
				return
			case _, ok := <-l.Notify: // a nil notification follows a reconnect
				if !ok {
					return
				}
				c.invalidate()
			case <-ping.C:
				c.ping(l, quit)
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		// lib/pq's Close waits for a connection attempt in progress (up to its dial timeout):
		// shutdown does not wait with it.
		go func() { _ = l.Close() }()
	}
}

// ping checks the listener's connection; an answer that is late or an error stops the cache
// keeping entries until a ping is answered in time again.
func (c *BizTypeCache) ping(l *pq.Listener, quit <-chan struct{}) {
	res := make(chan error, 1)
	go func() { res <- l.Ping() }()
	select {
	case err := <-res:
		c.answered(err == nil)
		return
	case <-time.After(bizTypePingTimeout):
		c.answered(false)
	case <-quit:
		return
	}
	select { // the late answer: keep entries again only once the connection has answered
	case err := <-res:
		c.answered(err == nil)
	case <-quit:
	}
}

// answered records whether the listener's connection answered its last ping.
func (c *BizTypeCache) answered(ok bool) {
	c.mu.Lock()
	same := c.pingMissed == !ok
	c.mu.Unlock()
	if !same {
		c.set(func() { c.pingMissed = !ok })
	}
}
