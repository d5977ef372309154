package webhook

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
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
const SecretPrefix = "whsec_"

// Errors a Verifier returns.
var (
	ErrBadSignature = errors.New("webhook: no signature matches any configured secret")
	ErrStale        = errors.New("webhook: timestamp outside the tolerance")
	ErrReplay       = errors.New("webhook: this exact message was already accepted")
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
		if !strings.HasPrefix(s, SecretPrefix) {
			return nil, fmt.Errorf("webhook: secret %d must start with %q", i, SecretPrefix)
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, SecretPrefix))
		if err != nil || len(raw) < 16 {
			return nil, fmt.Errorf("webhook: secret %d is not base64 of at least 16 bytes", i)
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

// Verifier checks incoming callbacks: a signature by any configured secret, a timestamp within
// Tolerance, and no exact replay (the same webhook-id with the same signature) within the
// tolerance window. A retry of the same delivery keeps its webhook-id but is signed anew (new
// timestamp, new attempt number in the body), so it passes: deduplicate deliveries on
// webhook-id in your handler.
type Verifier struct {
	hooks []*standardwebhooks.Webhook
	now   func() time.Time

	mu   sync.Mutex
	seen map[string]time.Time // accepted id+signature pairs and when they may be forgotten
}

// NewVerifier builds a verifier from one or more secrets.
func NewVerifier(secrets ...string) (*Verifier, error) {
	hooks, err := parseSecrets(secrets)
	if err != nil {
		return nil, err
	}
	return &Verifier{hooks: hooks, now: time.Now, seen: map[string]time.Time{}}, nil
}

// Verify checks body and headers. A nil error means the callback is authentic, fresh and not a
// replay; it is then remembered so an exact replay is refused.
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
	if d := now.Sub(time.Unix(sec, 0)); d > Tolerance || d < -Tolerance {
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
	key := id + "\x00" + sig
	v.mu.Lock()
	defer v.mu.Unlock()
	if until, dup := v.seen[key]; dup && now.Before(until) {
		return ErrReplay
	}
	if len(v.seen) > 100_000 {
		for k, until := range v.seen {
			if now.After(until) {
				delete(v.seen, k)
			}
		}
	}
	v.seen[key] = now.Add(2 * Tolerance)
	return nil
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
