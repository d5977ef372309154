package gateway

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

// The console's cookies. The session cookie holds the API key the operator signed in with,
// sealed (AES-256-GCM) under a key every gateway on the database shares, so any gateway serves
// any session and the browser can neither read nor change it; the key is looked up again on
// every request, so a revoked key ends its sessions at once.
const (
	consoleCookie      = "courier_console"
	consoleLoginCookie = "courier_console_login" // the sign-in form's CSRF nonce, before a session exists
	consoleSecret      = "console-session-key"   // SecretStore name of the sealing key
	// DefaultConsoleSessionTTL is how long a console sign-in lasts.
	DefaultConsoleSessionTTL = 12 * time.Hour
	loginFormTTL             = time.Hour
)

// consoleSession is what the session cookie seals.
type consoleSession struct {
	V        int    `json:"v"`
	Token    string `json:"t"`   // the API key
	IssuedAt int64  `json:"iat"` // unix seconds
	Nonce    string `json:"n"`   // ties the CSRF token to this session
}

// sessionKeys derives the session cookie's sealing key and the CSRF tokens' MAC key from one
// stored secret.
type sessionKeys struct {
	secrets SecretStore // nil: a key of this process only (tests, single process)

	mu   sync.Mutex
	aead cipher.AEAD
	mac  []byte
}

func (k *sessionKeys) load(ctx context.Context) (cipher.AEAD, []byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.aead != nil {
		return k.aead, k.mac, nil
	}
	var secret []byte
	if k.secrets == nil {
		secret = make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return nil, nil, err
		}
	} else {
		var err error
		if secret, err = k.secrets.Secret(ctx, consoleSecret); err != nil {
			return nil, nil, err
		}
	}
	derive := func(purpose string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(purpose))
		return m.Sum(nil)
	}
	block, err := aes.NewCipher(derive("courier console session"))
	if err != nil {
		return nil, nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, nil, err
	}
	k.aead, k.mac = aead, derive("courier console csrf")
	return k.aead, k.mac, nil
}

// seal returns the cookie value of s.
func (k *sessionKeys) seal(ctx context.Context, s consoleSession) (string, error) {
	aead, _, err := k.load(ctx)
	if err != nil {
		return "", err
	}
	plain, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(aead.Seal(nonce, nonce, plain, []byte(consoleCookie))), nil
}

var errNoSession = errors.New("no console session")

// open reads a cookie value seal made; anything else is errNoSession.
func (k *sessionKeys) open(ctx context.Context, raw string) (consoleSession, error) {
	aead, _, err := k.load(ctx)
	if err != nil {
		return consoleSession{}, err
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil || len(raw) > 4096 || len(b) < aead.NonceSize()+aead.Overhead() {
		return consoleSession{}, errNoSession
	}
	plain, err := aead.Open(nil, b[:aead.NonceSize()], b[aead.NonceSize():], []byte(consoleCookie))
	if err != nil {
		return consoleSession{}, errNoSession
	}
	var s consoleSession
	if json.Unmarshal(plain, &s) != nil || s.V != 1 || s.Token == "" || s.Nonce == "" {
		return consoleSession{}, errNoSession
	}
	return s, nil
}

// csrf is the CSRF token of a form for purpose ("session" or "login") and nonce.
func (k *sessionKeys) csrf(ctx context.Context, purpose, nonce string) (string, error) {
	_, key, err := k.load(ctx)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write([]byte(nonce))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)), nil
}

// sameToken compares a submitted CSRF token with the expected one in constant time.
func sameToken(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func randomNonce() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// consoleCookieOf builds one of the console's cookies: HttpOnly, SameSite=Strict, and Secure
// whenever the console is reached over TLS (directly, or through a proxy that says so).
func consoleCookieOf(c echo.Context, name, value, path string, maxAge time.Duration) *http.Cookie {
	ck := &http.Cookie{Name: name, Value: value, Path: path, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: c.Scheme() == "https"}
	if maxAge < 0 {
		ck.MaxAge = -1
		ck.Expires = time.Unix(0, 0)
	} else {
		ck.MaxAge = int(maxAge / time.Second)
	}
	return ck
}
