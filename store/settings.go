package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// Secret returns the server-side secret called name, generating it (32 random bytes) the first
// time any courier process asks. Every process on the database reads the same value, so what one
// gateway seals another can open.
func (s *Store) Secret(ctx context.Context, name string) ([]byte, error) {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	if _, err := s.db.NewRaw("INSERT INTO courier_settings (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
		name, hex.EncodeToString(fresh)).Exec(ctx); err != nil {
		return nil, fmt.Errorf("store secret %s: %w", name, err)
	}
	var value string
	if err := s.db.NewRaw("SELECT value FROM courier_settings WHERE name = ?", name).Scan(ctx, &value); err != nil {
		return nil, fmt.Errorf("read secret %s: %w", name, err)
	}
	return hex.DecodeString(value)
}
