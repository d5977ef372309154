package main

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseCountsPagesWordsAndCharacters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, text string
		want       Summary
	}{
		{"one line", "hello world", Summary{Pages: 1, Words: 2, Characters: 11}},
		{"form feeds split pages", "one\ftwo three\ffour", Summary{Pages: 3, Words: 4, Characters: 18}},
		{"blank pages do not count", "\f\n  \fbody text\f\f", Summary{Pages: 1, Words: 2, Characters: 16}},
		{"unicode", "Grüße, 世界\n", Summary{Pages: 1, Words: 2, Characters: 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Parse(Document{Text: tc.text}))
		})
	}
	require.Equal(t, "a.txt", Parse(Document{Name: "a.txt", Text: "x"}).Name)
}

func TestDecodeDocument(t *testing.T) {
	t.Parallel()
	d, err := DecodeDocument(json.RawMessage(`{"name":"a.txt","text":"x y","pages_hint":3}`))
	require.NoError(t, err)
	require.Equal(t, Document{Name: "a.txt", Text: "x y"}, d, "unknown fields are ignored")

	for _, payload := range []string{``, `null`, `"text"`, `3`, `[]`, `{}`, `{"text":""}`, `{"text":" \n\t\f"}`, `{"text":["a"]}`, `{"text":"a"`} {
		_, err := DecodeDocument(json.RawMessage(payload))
		require.True(t, errors.Is(err, ErrUnusablePayload), "payload %q: %v", payload, err)
	}
}

func TestHeartbeatInterval(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"": 0, "0s": 0, "10s": 10 * time.Second / 3, "1m30s": 30 * time.Second} {
		got, err := HeartbeatInterval(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"10", "soon", "-3s"} {
		_, err := HeartbeatInterval(in)
		require.Error(t, err, in)
	}
}
