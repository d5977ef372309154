package webhook

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/courier-oss/courier"
)

// Header names (Standard Webhooks).
const (
	HeaderID        = standardwebhooks.HeaderWebhookID
	HeaderTimestamp = standardwebhooks.HeaderWebhookTimestamp
	HeaderSignature = standardwebhooks.HeaderWebhookSignature
)

// Tolerance is how far a callback's timestamp may be from the receiver's clock.
const Tolerance = 5 * time.Minute

// SecretPrefix starts every courier signing secret.
const SecretPrefix = courier.SigningSecretPrefix

// Errors a Verifier returns.
var (
	ErrBadSignature = errors.New("webhook: no signature matches any configured secret")
	ErrStale        = errors.New("webhook: timestamp outside the tolerance")
	ErrReplay       = errors.New("webhook: this message was already accepted")
	ErrMissing      = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature")
)

// GenerateSecret returns a new random signing secret ("whsec_" + base64 of 32 bytes).
func GenerateSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

func parseSecrets(secrets []string) ([]*standardwebhooks.Webhook, error) {
	if len(secrets) == 0 {
		return nil, errors.New("webhook: at least one secret is required")
	}
	out := make([]*standardwebhooks.Webhook, 0, len(secrets))
	for i, s := range secrets {
		raw, err := courier.SigningKey(s)
		if err != nil {
			return nil, fmt.Errorf("webhook: secret %d %w", i, err)
		}
		wh, err := standardwebhooks.NewWebhookRaw(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, wh)
	}
	return out, nil
}

// Signer signs outgoing callbacks. With several secrets (during a rotation: the new one and the
// old one) every callback carries one signature per secret, so receivers holding either accept.
type Signer struct{ hooks []*standardwebhooks.Webhook }

// NewSigner builds a signer from one or more secrets.
func NewSigner(secrets ...string) (*Signer, error) {
	hooks, err := parseSecrets(secrets)
	if err != nil {
		return nil, err
	}
	return &Signer{hooks: hooks}, nil
}

// Sign sets the Standard Webhooks headers on h for exactly these body bytes.
func (s *Signer) Sign(h http.Header, id string, at time.Time, body []byte) error {
	if id == "" {
		return errors.New("webhook: id is required")
	}
	sigs := make([]string, 0, len(s.hooks))
	for _, wh := range s.hooks {
		sig, err := wh.Sign(id, at, body)
		if err != nil {
			return err
		}
		sigs = append(sigs, sig)
	}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	h.Set(HeaderSignature, strings.Join(sigs, " "))
	return nil
}

// DefaultMaxRemembered is how many accepted messages a Verifier remembers for replay detection
// unless WithMaxRemembered says otherwise. Each costs about 175 bytes, so the default stays under
// 20 MiB; it covers 300 messages a second over the tolerance window.
const DefaultMaxRemembered = 100_000

// Option configures a Verifier built by NewVerifierWith.
type Option func(*verifierConfig)

type verifierConfig struct {
	maxRemembered int
	now           func() time.Time
}

// WithMaxRemembered bounds the replay cache to n accepted messages (default
// DefaultMaxRemembered; n must be positive). When more than n messages arrive within the
// tolerance window the oldest is forgotten early and could be replayed until its timestamp goes
// stale: size n above your peak number of callbacks per 5 minutes.
func WithMaxRemembered(n int) Option {
	return func(c *verifierConfig) { c.maxRemembered = n }
}

// WithClock sets the receiver's clock, against which timestamps are checked and remembered
// messages expire (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(c *verifierConfig) { c.now = now }
}

// Verifier checks incoming callbacks: a signature by any configured secret, a timestamp within
// Tolerance, and no replay: a message whose id, timestamp and body were already accepted is
// refused while its timestamp is fresh, however its webhook-signature header is written. A retry
// of the same delivery keeps its webhook-id but is signed anew (new timestamp, new attempt number
// in the body), so it passes: deduplicate deliveries on webhook-id in your handler. Safe for
// concurrent use.
type Verifier struct {
	hooks []*standardwebhooks.Webhook
	now   func() time.Time

	mu sync.Mutex
	// seen maps the digest of each accepted message to the time after which its timestamp is
	// stale. The LRU bounds memory; its order is acceptance order, so the oldest entry is the
	// first to expire (give or take the timestamps' spread) and the first to go when full.
	seen *simplelru.LRU[[sha256.Size]byte, time.Time]
}

// NewVerifier builds a verifier from one or more secrets, with the default options.
func NewVerifier(secrets ...string) (*Verifier, error) {
	return NewVerifierWith(secrets)
}

// NewVerifierWith builds a verifier from one or more secrets and options.
func NewVerifierWith(secrets []string, opts ...Option) (*Verifier, error) {
	hooks, err := parseSecrets(secrets)
	if err != nil {
		return nil, err
	}
	cfg := verifierConfig{maxRemembered: DefaultMaxRemembered, now: time.Now}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxRemembered <= 0 {
		return nil, fmt.Errorf("webhook: max remembered messages must be positive, got %d", cfg.maxRemembered)
	}
	if cfg.now == nil {
		return nil, errors.New("webhook: clock must not be nil")
	}
	seen, err := simplelru.NewLRU[[sha256.Size]byte, time.Time](cfg.maxRemembered, nil)
	if err != nil {
		return nil, err
	}
	return &Verifier{hooks: hooks, now: cfg.now, seen: seen}, nil
}

// messageKey identifies a message by exactly what its signature covers: id, timestamp (as the
// number that is signed, so "+ts" or "0ts" spellings are the same message) and body. Keying on
// the signature header instead let a captured request through again with the header reworded
// ("v1,<sig> v1,x", extra spaces, the signature twice), since any list containing one valid
// signature verifies. Lengths are framed so that no two different messages share a key.
func messageKey(id string, sec int64, body []byte) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(id)))
	h.Write(n[:])
	h.Write([]byte(id))
	binary.BigEndian.PutUint64(n[:], uint64(sec))
	h.Write(n[:])
	h.Write(body)
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

// Verify checks body and headers. A nil error means the callback is authentic, fresh and not a
// replay; it is then remembered until its timestamp goes stale, so a replay is refused.
func (v *Verifier) Verify(body []byte, h http.Header) error {
	id, ts, sig := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || sig == "" {
		return ErrMissing
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrMissing
	}
	now := v.now()
	at := time.Unix(sec, 0)
	if d := now.Sub(at); d > Tolerance || d < -Tolerance {
		return ErrStale
	}
	ok := false
	for _, wh := range v.hooks {
		// The timestamp was checked above against our own clock.
		if wh.VerifyIgnoringTimestamp(body, h) == nil {
			ok = true
			break
		}
	}
	if !ok {
		return ErrBadSignature
	}
	key := messageKey(id, sec, body)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.forgetExpired(now)
	if staleAt, dup := v.seen.Peek(key); dup && !now.After(staleAt) {
		return ErrReplay
	}
	v.seen.Add(key, at.Add(Tolerance))
	return nil
}

// forgetExpired drops remembered messages from the oldest end while their timestamps are stale
// (a replay of them is refused as stale anyway), so memory follows the traffic of the last
// window rather than staying at the bound. The caller holds v.mu.
func (v *Verifier) forgetExpired(now time.Time) {
	for {
		_, staleAt, ok := v.seen.GetOldest()
		if !ok || !now.After(staleAt) {
			return
		}
		v.seen.RemoveOldest()
	}
}

// Middleware verifies each request before next sees it; a failure is 401 with a short reason.
// The body is restored for next. maxBody bounds what is read (0 means 1 MiB).
func (v *Verifier) Middleware(maxBody int64, next http.Handler) http.Handler {
	if maxBody <= 0 {
		maxBody = 1 << 20
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			http.Error(w, "body too large or unreadable", http.StatusRequestEntityTooLarge)
			return
		}
		if err := v.Verify(body, r.Header); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}
