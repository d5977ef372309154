package webhook

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
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
