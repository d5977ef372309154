package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"

	"github.com/courier-oss/courier"
)

// SecretStore keeps server-side secrets shared by every gateway on the database (store.Store).
type SecretStore interface {
	Secret(ctx context.Context, name string) ([]byte, error)
}

// pageTokenSecret names the key that seals page tokens.
const pageTokenSecret = "page-token-key"

// pageTokens seals the page tokens the gateway passes through from Temporal: a token is the
// engine's own cursor plus a MAC over it and the query it belongs to. A token the gateway did not
// issue for that query is refused (400) before it reaches Temporal, which would otherwise retry a
// cursor it cannot read until the request's deadline.
type pageTokens struct {
	secrets SecretStore // nil: a key of this process only (tests, single process)

	mu  sync.Mutex
	key []byte
}

func (p *pageTokens) keyFor(ctx context.Context) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.key != nil {
		return p.key, nil
	}
	if p.secrets == nil {
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			return nil, err
		}
		p.key = k
		return k, nil
	}
	k, err := p.secrets.Secret(ctx, pageTokenSecret)
	if err != nil {
		return nil, err
	}
	p.key = k
	return k, nil
}

func tokenMAC(key []byte, query string, cursor []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(query))
	m.Write([]byte{0})
	m.Write(cursor)
	return m.Sum(nil)
}

// seal returns the page token for the engine's cursor of query ("" for no next page).
func (p *pageTokens) seal(ctx context.Context, query string, cursor []byte) (string, error) {
	if len(cursor) == 0 {
		return "", nil
	}
	key, err := p.keyFor(ctx)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(append(tokenMAC(key, query, cursor), cursor...)), nil
}

// open returns the engine's cursor in a token seal issued for query; nil for "".
func (p *pageTokens) open(ctx context.Context, query, token string) ([]byte, error) {
	if token == "" {
		return nil, nil
	}
	bad := &courier.Error{Code: courier.CodeInvalid, Message: "page_token is not a token this list returned for this query",
		Details: map[string]any{"field": "page_token"}}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) <= sha256.Size {
		return nil, bad
	}
	key, err := p.keyFor(ctx)
	if err != nil {
		return nil, err
	}
	mac, cursor := raw[:sha256.Size], raw[sha256.Size:]
	if !hmac.Equal(mac, tokenMAC(key, query, cursor)) {
		return nil, bad
	}
	return cursor, nil
}
