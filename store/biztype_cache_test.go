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

// While the change listener's connection is down, notifications sent meanwhile are lost: the
// cache keeps nothing then, and empties itself when the listener is back, so a change made by
// another process during the outage is never served stale.
func TestBizTypeCacheOutageServesNothingStale(t *testing.T) {
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

	proxy.Cut()
	require.Eventually(t, func() bool { return !c.Keeps() }, 10*time.Second, 10*time.Millisecond, "the lost connection was never noticed")
	_, _, err = other.PutBizType(ctx, cacheTestType("https://b.example/cb")) // its notification reaches nobody
	require.NoError(t, err)
	got, err := c.GetBizType(ctx, "order.close")
	require.NoError(t, err)
	require.Equal(t, "https://b.example/cb", got.CallbackURL, "during the outage every read goes to the database")

	proxy.Restore()
	require.Eventually(t, c.Keeps, 20*time.Second, 10*time.Millisecond, "the listener never came back")
	got, err = c.GetBizType(ctx, "order.close")
	require.NoError(t, err)
	require.Equal(t, "https://b.example/cb", got.CallbackURL)
}
