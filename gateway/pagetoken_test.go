package gateway

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
)

type fixedSecret []byte

func (f fixedSecret) Secret(context.Context, string) ([]byte, error) { return f, nil }

func TestPageTokens(t *testing.T) {
	ctx := t.Context()
	a := &pageTokens{secrets: fixedSecret("k1")}
	tok, err := a.seal(ctx, "q1", []byte(`{"cursor":1}`))
	require.NoError(t, err)

	b := &pageTokens{secrets: fixedSecret("k1")} // another gateway on the same database
	cur, err := b.open(ctx, "q1", tok)
	require.NoError(t, err)
	require.Equal(t, `{"cursor":1}`, string(cur))

	for name, c := range map[string]struct{ query, token string }{
		"other query":  {"q2", tok},
		"garbage":      {"q1", "garbage"},
		"not base64":   {"q1", "%%%"},
		"truncated":    {"q1", tok[:10]},
		"tampered":     {"q1", tok[:len(tok)-2] + "AA"},
		"foreign key":  {"q1", mustSeal(t, &pageTokens{secrets: fixedSecret("k2")}, "q1")},
		"process-only": {"q1", mustSeal(t, &pageTokens{}, "q1")},
	} {
		_, err := b.open(ctx, c.query, c.token)
		require.Equal(t, courier.CodeInvalid, courier.ErrorCode(err), name)
	}
	none, err := b.open(ctx, "q1", "")
	require.NoError(t, err)
	require.Nil(t, none)
	empty, err := a.seal(ctx, "q1", nil)
	require.NoError(t, err)
	require.Empty(t, empty, "no next page, no token")
}

func mustSeal(t *testing.T, p *pageTokens, query string) string {
	tok, err := p.seal(t.Context(), query, []byte(`{"cursor":1}`))
	require.NoError(t, err)
	return tok
}
