package store_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/mq/mqtest"
	"github.com/courier-oss/courier/store"
)

func cacheTestType(url string) courier.BizType {
	return courier.BizType{Name: "order.close", Delivery: courier.DeliveryHTTP, CallbackURL: url,
		Secrets: []string{"whsec_c2VjcmV0c2VjcmV0c2VjcmV0"}}
}

// setCallbackBehindTheStore changes a type the way no Store call announces: plain SQL.
func setCallbackBehindTheStore(t *testing.T, s *store.Store, name, url string) {
	t.Helper()
	_, err := s.DB().ExecContext(t.Context(), "UPDATE courier_biz_types SET callback_url = ? WHERE name = ?", url, name)
	require.NoError(t, err)
}

func liveCache(t *testing.T, s *store.Store, maxAge time.Duration) *store.BizTypeCache {
	t.Helper()
	c := s.NewBizTypeCache(maxAge, nil)
	t.Cleanup(func() { _ = c.Close() })
	require.Eventually(t, c.Keeps, 10*time.Second, 10*time.Millisecond, "the change listener never started listening")
	return c
}

func TestBizTypeCacheServesFromMemoryUntilAChange(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		_, _, err := s.PutBizType(ctx, cacheTestType("https://a.example/cb"))
		require.NoError(t, err)
		c := liveCache(t, s, time.Hour)
		got, err := c.GetBizType(ctx, "order.close")
		require.NoError(t, err)
		require.Equal(t, "https://a.example/cb", got.CallbackURL)

		setCallbackBehindTheStore(t, s, "order.close", "https://sql.example/cb")
		got, err = c.GetBizType(ctx, "order.close")
		require.NoError(t, err)
		require.Equal(t, "https://a.example/cb", got.CallbackURL, "a second read is served from memory")

		// A change through the store is seen by the very next read: the cache is emptied
		// before PutBizType returns.
		_, _, err = s.PutBizType(ctx, cacheTestType("https://b.example/cb"))
		require.NoError(t, err)
		got, err = c.GetBizType(ctx, "order.close")
		require.NoError(t, err)
		require.Equal(t, "https://b.example/cb", got.CallbackURL)

		require.NoError(t, s.DeleteBizType(ctx, "order.close"))
		_, err = c.GetBizType(ctx, "order.close")
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err), "a deleted type is gone at once")
		_, _, err = s.PutBizType(ctx, cacheTestType("https://c.example/cb"))
		require.NoError(t, err)
		got, err = c.GetBizType(ctx, "order.close")
		require.NoError(t, err, "not_found is not cached")
		require.Equal(t, "https://c.example/cb", got.CallbackURL)
	})
}

func TestBizTypeCacheMaxAge(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		_, _, err := s.PutBizType(ctx, cacheTestType("https://a.example/cb"))
		require.NoError(t, err)
		c := liveCache(t, s, 50*time.Millisecond)
		_, err = c.GetBizType(ctx, "order.close")
		require.NoError(t, err)
		setCallbackBehindTheStore(t, s, "order.close", "https://sql.example/cb")
		require.Eventually(t, func() bool {
			got, err := c.GetBizType(ctx, "order.close")
			return err == nil && got.CallbackURL == "https://sql.example/cb"
		}, 10*time.Second, 10*time.Millisecond, "an entry older than the max age is read again")
	})
}

// Two processes on one PostgreSQL database: a change made through one reaches the other's
// cache by notification.
func TestBizTypeCacheHearsOtherProcesses(t *testing.T) {
	ctx := t.Context()
	writer, dsn := testenv.Store(t, "postgres")
	reader, err := store.Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { reader.Close() })
	_, _, err = writer.PutBizType(ctx, cacheTestType("https://a.example/cb"))
	require.NoError(t, err)
	c := liveCache(t, reader, time.Hour)
	got, err := c.GetBizType(ctx, "order.close")
	require.NoError(t, err)
	require.Equal(t, "https://a.example/cb", got.CallbackURL)

	_, _, err = writer.PutBizType(ctx, cacheTestType("https://b.example/cb"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := c.GetBizType(ctx, "order.close")
		return err == nil && got.CallbackURL == "https://b.example/cb"
	}, 10*time.Second, 10*time.Millisecond, "the other process's change never reached the cache")

	require.NoError(t, writer.DeleteBizType(ctx, "order.close"))
	require.Eventually(t, func() bool {
		_, err := c.GetBizType(ctx, "order.close")
		return courier.ErrorCode(err) == courier.CodeNotFound
	}, 10*time.Second, 10*time.Millisecond, "the other process's delete never reached the cache")
}

// Without its change listener a PostgreSQL cache cannot know of other processes' changes, so it
// keeps nothing: every read goes to the database.
func TestBizTypeCacheKeepsNothingWithoutItsListener(t *testing.T) {
	ctx := t.Context()
	s, _ := testenv.Store(t, "postgres")
	s.SetListenURL("postgres://postgres@127.0.0.1:1/nowhere?sslmode=disable&connect_timeout=1")
	_, _, err := s.PutBizType(ctx, cacheTestType("https://a.example/cb"))
	require.NoError(t, err)
	c := s.NewBizTypeCache(time.Hour, nil)
	t.Cleanup(func() { _ = c.Close() })
	_, err = c.GetBizType(ctx, "order.close")
	require.NoError(t, err)
	setCallbackBehindTheStore(t, s, "order.close", "https://sql.example/cb")
	got, err := c.GetBizType(ctx, "order.close")
	require.NoError(t, err)
	require.Equal(t, "https://sql.example/cb", got.CallbackURL)
	require.False(t, c.Keeps())
}

// listenerOutage is a PostgreSQL cache whose change listener connects through a proxy the
// test can cut or stall, holding "order.close" as it was first read, and another process's
// store on the same database.
type listenerOutage struct {
	cache *store.BizTypeCache
	other *store.Store
	proxy *mqtest.Proxy
}

func newListenerOutage(t *testing.T) listenerOutage {
	t.Helper()
	ctx := t.Context()
	s, dsn := testenv.Store(t, "postgres")
	other, err := store.Open(ctx, dsn) // another process
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := mqtest.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	s.SetListenURL(u.String())

	_, _, err = s.PutBizType(ctx, cacheTestType("https://a.example/cb"))
	require.NoError(t, err)
	c := liveCache(t, s, time.Hour)
	_, err = c.GetBizType(ctx, "order.close")
	require.NoError(t, err)
	return listenerOutage{cache: c, other: other, proxy: proxy}
}

// changeUnheard has the other process change the type while the cache cannot hear it; every
// read must then go to the database.
func (o listenerOutage) changeUnheard(t *testing.T, noticed time.Duration, what string) {
	t.Helper()
	require.Eventually(t, func() bool { return !o.cache.Keeps() }, noticed, 10*time.Millisecond, "the %s was never noticed", what)
	_, _, err := o.other.PutBizType(t.Context(), cacheTestType("https://b.example/cb"))
	require.NoError(t, err)
	got, err := o.cache.GetBizType(t.Context(), "order.close")
	require.NoError(t, err)
	require.Equal(t, "https://b.example/cb", got.CallbackURL, "during the %s every read goes to the database", what)
}

// back waits until the cache keeps entries again and checks it serves the change it missed.
func (o listenerOutage) back(t *testing.T) {
	t.Helper()
	require.Eventually(t, o.cache.Keeps, 20*time.Second, 10*time.Millisecond, "the listener never came back")
	got, err := o.cache.GetBizType(t.Context(), "order.close")
	require.NoError(t, err)
	require.Equal(t, "https://b.example/cb", got.CallbackURL)
}

// While the change listener's connection is down, notifications sent meanwhile are lost: the
// cache keeps nothing then, and empties itself when the listener is back, so a change made by
// another process during the outage is never served stale.
func TestBizTypeCacheOutageServesNothingStale(t *testing.T) {
	o := newListenerOutage(t)
	o.proxy.Cut()
	o.changeUnheard(t, 10*time.Second, "lost connection") // its notification reaches nobody
	o.proxy.Restore()
	o.back(t)
}

// A listener connection that goes silent without a reset (a dead network path) looks alive to
// lib/pq, and notifications stop arriving: the cache's ping notices the missing answer and it
// keeps nothing until the connection answers again, so a change made meanwhile by another
// process is never served stale.
func TestBizTypeCacheSilentConnectionServesNothingStale(t *testing.T) {
	o := newListenerOutage(t)
	o.proxy.Stall()
	// The first ping after the stall goes unanswered: within one ping interval and timeout.
	o.changeUnheard(t, 15*time.Second, "silent connection") // its notification is held back
	o.proxy.Resume()
	o.back(t)
}
