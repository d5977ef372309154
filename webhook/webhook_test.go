package webhook

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func secrets(t *testing.T, n int) []string {
	out := make([]string, n)
	for i := range out {
		s, err := GenerateSecret()
		require.NoError(t, err)
		out[i] = s
	}
	return out
}

func signed(t *testing.T, s *Signer, id string, at time.Time, body string) http.Header {
	h := http.Header{}
	require.NoError(t, s.Sign(h, id, at, []byte(body)))
	return h
}

func TestSignAndVerify(t *testing.T) {
	sec := secrets(t, 1)
	s, err := NewSigner(sec...)
	require.NoError(t, err)
	v, err := NewVerifier(sec...)
	require.NoError(t, err)
	h := signed(t, s, "dlv_1", time.Now(), `{"a":1}`)
	require.NoError(t, v.Verify([]byte(`{"a":1}`), h))
}

func TestTamperedStaleReplayedAndForeignAreRefused(t *testing.T) {
	sec := secrets(t, 2)
	s, _ := NewSigner(sec[0])
	v, _ := NewVerifier(sec[0])
	now := time.Now()

	h := signed(t, s, "dlv_tamper", now, `{"amount":1}`)
	require.ErrorIs(t, v.Verify([]byte(`{"amount":9}`), h), ErrBadSignature, "a changed body")

	h = signed(t, s, "dlv_id", now, `{}`)
	h.Set(HeaderID, "dlv_other")
	require.ErrorIs(t, v.Verify([]byte(`{}`), h), ErrBadSignature, "a changed id")

	h = signed(t, s, "dlv_ts", now, `{}`)
	h.Set(HeaderTimestamp, strconv.FormatInt(now.Add(time.Minute).Unix(), 10))
	require.ErrorIs(t, v.Verify([]byte(`{}`), h), ErrBadSignature, "a changed timestamp")

	h = signed(t, s, "dlv_old", now.Add(-10*time.Minute), `{}`)
	require.ErrorIs(t, v.Verify([]byte(`{}`), h), ErrStale, "an expired signature")
	h = signed(t, s, "dlv_future", now.Add(10*time.Minute), `{}`)
	require.ErrorIs(t, v.Verify([]byte(`{}`), h), ErrStale, "a timestamp from the future")

	h = signed(t, s, "dlv_replay", now, `{"attempt":1}`)
	require.NoError(t, v.Verify([]byte(`{"attempt":1}`), h))
	require.ErrorIs(t, v.Verify([]byte(`{"attempt":1}`), h), ErrReplay, "the same message captured and sent again")
	retry := signed(t, s, "dlv_replay", now.Add(time.Second), `{"attempt":2}`)
	require.NoError(t, v.Verify([]byte(`{"attempt":2}`), retry), "courier's own retry of the delivery passes")

	other, _ := NewSigner(sec[1])
	h = signed(t, other, "dlv_foreign", now, `{}`)
	require.ErrorIs(t, v.Verify([]byte(`{}`), h), ErrBadSignature, "signed with another secret")

	require.ErrorIs(t, v.Verify([]byte(`{}`), http.Header{}), ErrMissing)
}

// During a rotation the sender signs with both secrets, so receivers that have either one accept.
func TestRotation(t *testing.T) {
	sec := secrets(t, 2)
	s, _ := NewSigner(sec[1], sec[0]) // new, old
	h := signed(t, s, "dlv_rot", time.Now(), `{}`)
	require.Len(t, strings.Fields(h.Get(HeaderSignature)), 2)
	for i := range sec {
		v, _ := NewVerifier(sec[i])
		require.NoError(t, v.Verify([]byte(`{}`), h), "receiver with secret %d", i)
	}
	v, _ := NewVerifier(sec[0], sec[1]) // a receiver that knows both
	require.NoError(t, v.Verify([]byte(`{}`), signed(t, mustSigner(t, sec[0]), "dlv_x", time.Now(), `{}`)))
}

func mustSigner(t *testing.T, s string) *Signer {
	sg, err := NewSigner(s)
	require.NoError(t, err)
	return sg
}

func TestBadSecrets(t *testing.T) {
	_, err := NewSigner()
	require.Error(t, err)
	_, err = NewSigner("plain")
	require.Error(t, err)
	_, err = NewVerifier("whsec_!!!")
	require.Error(t, err)
}

func TestMiddleware(t *testing.T) {
	sec := secrets(t, 1)
	v, _ := NewVerifier(sec...)
	var got string
	srv := httptest.NewServer(v.Middleware(0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
	})))
	defer srv.Close()
	body := `{"order":"o-1"}`
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(body))
	require.NoError(t, mustSigner(t, sec[0]).Sign(req.Header, "dlv_mw", time.Now(), []byte(body)))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, body, got, "the handler sees the verified body")

	req, _ = http.NewRequest("POST", srv.URL, strings.NewReader(body))
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 401, resp.StatusCode)
}

// A captured request sent again is refused however its webhook-signature header is reworded:
// any list holding one valid signature verifies, so the replay check must not look at the
// header's text. The timestamp header is signed as a number, so its spelling is no way out either.
func TestReplayWithRewrittenHeadersIsRefused(t *testing.T) {
	sec := secrets(t, 2)
	s, err := NewSigner(sec...) // two signatures, as during a rotation
	require.NoError(t, err)
	at := time.Unix(1_800_000_000, 0)
	body := `{"attempt":1}`
	orig := signed(t, s, "dlv_captured", at, body)
	sigs := strings.Fields(orig.Get(HeaderSignature))
	require.Len(t, sigs, 2)
	ts := orig.Get(HeaderTimestamp)

	rewrites := map[string]func(h http.Header){
		"a bogus signature appended": func(h http.Header) { h.Set(HeaderSignature, sigs[0]+" v1,x") },
		"a bogus signature first":    func(h http.Header) { h.Set(HeaderSignature, "v1,x "+sigs[0]) },
		"an unknown version added":   func(h http.Header) { h.Set(HeaderSignature, "v1a,abc "+sigs[0]) },
		"extra spaces":               func(h http.Header) { h.Set(HeaderSignature, "  "+sigs[0]+"   "+sigs[1]+" ") },
		"a signature duplicated":     func(h http.Header) { h.Set(HeaderSignature, sigs[0]+" "+sigs[0]) },
		"the signatures reordered":   func(h http.Header) { h.Set(HeaderSignature, sigs[1]+" "+sigs[0]) },
		"only the first signature":   func(h http.Header) { h.Set(HeaderSignature, sigs[0]) },
		"only the second signature":  func(h http.Header) { h.Set(HeaderSignature, sigs[1]) },
		"the timestamp with a plus":  func(h http.Header) { h.Set(HeaderTimestamp, "+"+ts) },
		"the timestamp zero-padded":  func(h http.Header) { h.Set(HeaderTimestamp, "00"+ts) },
	}
	for name, rewrite := range rewrites {
		t.Run(name, func(t *testing.T) {
			h := orig.Clone()
			rewrite(h)
			for _, order := range [][2]http.Header{{orig, h}, {h, orig}} {
				v, err := NewVerifierWith(sec, WithClock(func() time.Time { return at }))
				require.NoError(t, err)
				require.NoError(t, v.Verify([]byte(body), order[0]), "the first copy is accepted")
				// ErrReplay (not ErrBadSignature) also proves the rewritten header still verifies.
				require.ErrorIs(t, v.Verify([]byte(body), order[1]), ErrReplay)
			}
		})
	}
}

// Courier retries a delivery under the same webhook-id, signed anew: the receiver accepts every
// retry, and refuses a replay of each.
func TestRetriesOfOneDeliveryPass(t *testing.T) {
	sec := secrets(t, 1)
	s := mustSigner(t, sec[0])
	at := time.Unix(1_800_000_000, 0)
	now := at
	v, err := NewVerifierWith(sec, WithClock(func() time.Time { return now }))
	require.NoError(t, err)

	first := signed(t, s, "dlv_retry", at, `{"attempt":1}`)
	require.NoError(t, v.Verify([]byte(`{"attempt":1}`), first))
	// Within the same second: only the body differs.
	sameSecond := signed(t, s, "dlv_retry", at, `{"attempt":2}`)
	require.NoError(t, v.Verify([]byte(`{"attempt":2}`), sameSecond))
	now = at.Add(90 * time.Second)
	later := signed(t, s, "dlv_retry", now, `{"attempt":3}`)
	require.NoError(t, v.Verify([]byte(`{"attempt":3}`), later))

	require.ErrorIs(t, v.Verify([]byte(`{"attempt":1}`), first), ErrReplay)
	require.ErrorIs(t, v.Verify([]byte(`{"attempt":2}`), sameSecond), ErrReplay)
	require.ErrorIs(t, v.Verify([]byte(`{"attempt":3}`), later), ErrReplay)
}

// However many distinct messages arrive, the replay cache holds at most its bound, and keeps
// the newest.
func TestReplayCacheIsBounded(t *testing.T) {
	sec := secrets(t, 1)
	s := mustSigner(t, sec[0])
	now := time.Unix(1_800_000_000, 0)
	const bound = 16
	v, err := NewVerifierWith(sec, WithMaxRemembered(bound), WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	var last http.Header
	for i := range 2_000 {
		body := fmt.Sprintf(`{"n":%d}`, i)
		last = signed(t, s, fmt.Sprint("dlv_", i), now, body)
		require.NoError(t, v.Verify([]byte(body), last))
		require.LessOrEqual(t, v.seen.Len(), bound)
	}
	require.Equal(t, bound, v.seen.Len())
	require.ErrorIs(t, v.Verify([]byte(`{"n":1999}`), last), ErrReplay, "the newest is remembered")

	_, err = NewVerifierWith(sec, WithMaxRemembered(0))
	require.Error(t, err, "an unbounded or empty cache is refused")
	_, err = NewVerifierWith(sec, WithClock(nil))
	require.Error(t, err)
}

// A remembered message is forgotten once its timestamp is stale (a replay of it is refused as
// stale from then on), and not before: expiry follows the message's timestamp, so one stamped
// ahead of the receiver's clock is kept longer.
func TestRememberedMessagesExpireWithTheirTimestamp(t *testing.T) {
	sec := secrets(t, 1)
	s := mustSigner(t, sec[0])
	t0 := time.Unix(1_800_000_000, 0)
	now := t0
	v, err := NewVerifierWith(sec, WithClock(func() time.Time { return now }))
	require.NoError(t, err)

	early := signed(t, s, "dlv_early", t0, `{}`)
	ahead := signed(t, s, "dlv_ahead", t0.Add(4*time.Minute), `{}`) // the sender's clock runs fast
	require.NoError(t, v.Verify([]byte(`{}`), early))
	require.NoError(t, v.Verify([]byte(`{}`), ahead))
	require.Equal(t, 2, v.seen.Len())

	now = t0.Add(Tolerance) // the last instant early is fresh
	require.ErrorIs(t, v.Verify([]byte(`{}`), early), ErrReplay)
	require.Equal(t, 2, v.seen.Len())

	now = t0.Add(Tolerance + time.Second)
	require.ErrorIs(t, v.Verify([]byte(`{}`), early), ErrStale)
	require.ErrorIs(t, v.Verify([]byte(`{}`), ahead), ErrReplay, "still fresh, still remembered")
	fresh := signed(t, s, "dlv_fresh", now, `{}`)
	require.NoError(t, v.Verify([]byte(`{}`), fresh))
	require.Equal(t, 2, v.seen.Len(), "early is forgotten; ahead and fresh remain")
	_, kept := v.seen.Peek(messageKey("dlv_early", t0.Unix(), []byte(`{}`)))
	require.False(t, kept)

	now = t0.Add(4*time.Minute + Tolerance + time.Second)
	require.ErrorIs(t, v.Verify([]byte(`{}`), ahead), ErrStale)
	require.NoError(t, v.Verify([]byte(`{}`), signed(t, s, "dlv_last", now, `{}`)))
	require.Equal(t, 2, v.seen.Len(), "ahead is forgotten; fresh and last remain")
	_, kept = v.seen.Peek(messageKey("dlv_ahead", t0.Add(4*time.Minute).Unix(), []byte(`{}`)))
	require.False(t, kept)
}

// Concurrent copies of one message: exactly one is accepted.
func TestConcurrentCopiesAcceptOnce(t *testing.T) {
	sec := secrets(t, 1)
	v, err := NewVerifier(sec...)
	require.NoError(t, err)
	h := signed(t, mustSigner(t, sec[0]), "dlv_race", time.Now(), `{}`)
	var accepted atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if v.Verify([]byte(`{}`), h.Clone()) == nil {
				accepted.Add(1)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(1), accepted.Load())
}
