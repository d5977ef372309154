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
)

type apiKeyRow struct {
	bun.BaseModel `bun:"table:courier_api_keys"`

	ID        string       `bun:"id,pk"`
	Name      string       `bun:"name"`
	KeyHash   string       `bun:"key_hash"`
	Scopes    string       `bun:"scopes"`
	CreatedAt time.Time    `bun:"created_at,skipupdate"`
	RevokedAt bun.NullTime `bun:"revoked_at"`
}

// HashAPIKey is how a key is stored and looked up: SHA-256 of the whole token. Tokens carry 256
// bits of randomness, so a fast hash is enough (no password stretching needed).
func HashAPIKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// CreateAPIKey stores a new key and returns it with its token, which is shown once and never
// stored.
func (s *Store) CreateAPIKey(ctx context.Context, name string, scopes []courier.Scope) (courier.APIKey, string, error) {
	idb := make([]byte, 6)
	secret := make([]byte, 32)
	if _, err := rand.Read(idb); err != nil {
		return courier.APIKey{}, "", err
	}
	if _, err := rand.Read(secret); err != nil {
		return courier.APIKey{}, "", err
	}
	id := "key_" + hex.EncodeToString(idb)
	token := "ck_" + hex.EncodeToString(idb) + "_" + base64.RawURLEncoding.EncodeToString(secret)
	names := make([]string, len(scopes))
	for i, sc := range scopes {
		names[i] = string(sc)
	}
	row := apiKeyRow{ID: id, Name: name, KeyHash: HashAPIKey(token), Scopes: strings.Join(names, ",")}
	if _, err := s.db.NewInsert().Model(&row).ExcludeColumn("created_at", "revoked_at").Exec(ctx); err != nil {
		return courier.APIKey{}, "", err
	}
	return courier.APIKey{ID: id, Name: name, Scopes: scopes}, token, nil
}

// LookupAPIKey finds an unrevoked key by its token; an unknown or revoked token is
// unauthenticated.
func (s *Store) LookupAPIKey(ctx context.Context, token string) (courier.APIKey, error) {
	var row apiKeyRow
	err := s.db.NewSelect().Model(&row).Where("key_hash = ?", HashAPIKey(token)).Where("revoked_at IS NULL").Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return courier.APIKey{}, courier.Errorf(courier.CodeUnauthenticated, "unknown or revoked API key")
	}
	if err != nil {
		return courier.APIKey{}, err
	}
	scopes, err := courier.ParseScopes(row.Scopes)
	if err != nil {
		// A stored key with a bad scope list is our fault, not the caller's.
		return courier.APIKey{}, fmt.Errorf("API key %s has unreadable scopes: %v", row.ID, err)
	}
	return courier.APIKey{ID: row.ID, Name: row.Name, Scopes: scopes}, nil
}

// RevokeAPIKey revokes a key by id.
func (s *Store) RevokeAPIKey(ctx context.Context, id string) error {
	res, err := s.db.NewUpdate().Model((*apiKeyRow)(nil)).Set("revoked_at = "+s.nowSQL()).
		Where("id = ?", id).Where("revoked_at IS NULL").Exec(ctx)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return courier.Errorf(courier.CodeNotFound, "API key %s not found or already revoked", id)
	}
	return nil
}
