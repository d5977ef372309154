package main

import (
	"encoding/json"
	"errors"
	"testing"

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
