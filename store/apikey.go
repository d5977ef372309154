package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/apikey"
)

type apiKeyRow struct {
	bun.BaseModel `bun:"table:courier_api_keys"`

	ID        string       `bun:"id,pk"`
	Name      string       `bun:"name"`
	KeyHash   string       `bun:"key_hash"`
	Scopes    string       `bun:"scopes"`
	CreatedAt time.Time    `bun:"created_at,skipupdate"`
	RevokedAt bun.NullTime `bun:"revoked_at"`
	// The key's own request rate (admission control): NULL keeps the gateway's default.
	RatePerSecond sql.NullFloat64 `bun:"rate_per_second"`
	RateBurst     int             `bun:"rate_burst"`
}

func (r *apiKeyRow) rate() *courier.Rate {
	if !r.RatePerSecond.Valid {
		return nil
	}
	return &courier.Rate{PerSecond: r.RatePerSecond.Float64, Burst: r.RateBurst}
}

func checkKeyRate(r *courier.Rate) error {
	if r == nil {
		return nil
	}
	return courier.CheckRate("rate_per_second", "burst", *r)
}

// HashAPIKey is how a key is stored and looked up: SHA-256 of the whole token. Tokens carry 256
// bits of randomness, so a fast hash is enough (no password stretching needed).
func HashAPIKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// CreateAPIKey stores a new key on the gateway's default request rate and returns it with its
// token, which is shown once and never stored.
func (s *Store) CreateAPIKey(ctx context.Context, name string, scopes []apikey.Scope) (apikey.Key, string, error) {
	return s.NewAPIKey(ctx, apikey.Key{Name: name, Scopes: scopes})
}

// NewAPIKey stores a new key with k's name, scopes and own request rate (nil: the gateway's
// default) and returns it with its token, which is shown once and never stored. k.ID is
// ignored: ids are generated.
func (s *Store) NewAPIKey(ctx context.Context, k apikey.Key) (apikey.Key, string, error) {
	name, scopes := k.Name, k.Scopes
	if err := checkKeyRate(k.Rate); err != nil {
		return apikey.Key{}, "", err
	}
	idb := make([]byte, 6)
	secret := make([]byte, 32)
	if _, err := rand.Read(idb); err != nil {
		return apikey.Key{}, "", err
	}
	if _, err := rand.Read(secret); err != nil {
		return apikey.Key{}, "", err
	}
	id := "key_" + hex.EncodeToString(idb)
	token := "ck_" + hex.EncodeToString(idb) + "_" + base64.RawURLEncoding.EncodeToString(secret)
	names := make([]string, len(scopes))
	for i, sc := range scopes {
		names[i] = string(sc)
	}
	row := apiKeyRow{ID: id, Name: name, KeyHash: HashAPIKey(token), Scopes: strings.Join(names, ",")}
	if k.Rate != nil {
		row.RatePerSecond, row.RateBurst = sql.NullFloat64{Float64: k.Rate.PerSecond, Valid: true}, k.Rate.Burst
	}
	if _, err := s.db.NewInsert().Model(&row).ExcludeColumn("created_at", "revoked_at").Exec(ctx); err != nil {
		return apikey.Key{}, "", err
	}
	return apikey.Key{ID: id, Name: name, Scopes: scopes, Rate: row.rate()}, token, nil
}

// LookupAPIKey finds an unrevoked key by its token; an unknown or revoked token is
// unauthenticated.
func (s *Store) LookupAPIKey(ctx context.Context, token string) (apikey.Key, error) {
	var row apiKeyRow
	err := s.db.NewSelect().Model(&row).Where("key_hash = ?", HashAPIKey(token)).Where("revoked_at IS NULL").Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return apikey.Key{}, courier.Errorf(courier.CodeUnauthenticated, "unknown or revoked API key")
	}
	if err != nil {
		return apikey.Key{}, err
	}
	scopes, err := apikey.ParseScopes(row.Scopes)
	if err != nil {
		// A stored key with a bad scope list is our fault, not the caller's.
		return apikey.Key{}, fmt.Errorf("API key %s has unreadable scopes: %v", row.ID, err)
	}
	return apikey.Key{ID: row.ID, Name: row.Name, Scopes: scopes, Rate: row.rate()}, nil
}

// SetAPIKeyRate gives an unrevoked key its own request rate (a zero Rate: unlimited), or with
// nil returns it to the gateway's default. Gateways apply it from the key's next request.
func (s *Store) SetAPIKeyRate(ctx context.Context, id string, r *courier.Rate) error {
	if err := checkKeyRate(r); err != nil {
		return err
	}
	rate, burst := sql.NullFloat64{}, 0
	if r != nil {
		rate, burst = sql.NullFloat64{Float64: r.PerSecond, Valid: true}, r.Burst
	}
	return s.updateUnrevokedKey(ctx, id, "revoked", func(q *bun.UpdateQuery) *bun.UpdateQuery {
		return q.Set("rate_per_second = ?", rate).Set("rate_burst = ?", burst)
	})
}

// updateUnrevokedKey applies set to key id unless it is revoked; a key that does not exist or
// is revoked is not_found, the message saying "not found or " + gone.
func (s *Store) updateUnrevokedKey(ctx context.Context, id, gone string, set func(*bun.UpdateQuery) *bun.UpdateQuery) error {
	res, err := set(s.db.NewUpdate().Model((*apiKeyRow)(nil))).Where("id = ?", id).Where("revoked_at IS NULL").Exec(ctx)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return courier.Errorf(courier.CodeNotFound, "API key %s not found or %s", id, gone)
	}
	return nil
}

// RevokeAPIKey revokes a key by id.
func (s *Store) RevokeAPIKey(ctx context.Context, id string) error {
	return s.updateUnrevokedKey(ctx, id, "already revoked", func(q *bun.UpdateQuery) *bun.UpdateQuery {
		return q.Set("revoked_at = " + s.nowSQL())
	})
}
