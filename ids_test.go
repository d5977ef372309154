package courier_test

import (
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
)

func TestCheckID(t *testing.T) {
	ok := []string{"order-42", "order:42", "заказ-✓", "a b", "a%b", "%2F", "...", ".a", "a.", strings.Repeat("x", courier.MaxIDBytes), "日本語の注文", "😀"}
	for _, id := range ok {
		require.NoError(t, courier.CheckID("biz_id", id), "%q follows the id rule", id)
	}
	bad := map[string]string{
		"empty":              "",
		"too long":           strings.Repeat("x", courier.MaxIDBytes+1),
		"too long in bytes":  strings.Repeat("я", courier.MaxIDBytes/2+1),
		"slash":              "a/b",
		"dot":                ".",
		"dot dot":            "..",
		"NUL":                "a\x00b",
		"newline":            "a\nb",
		"tab":                "a\tb",
		"DEL":                "a\x7fb",
		"C1 control":         "a\u0085b",
		"bidi override":      "a\u202eb",
		"zero width space":   "a\u200bb",
		"invalid UTF-8":      "a\xffb",
		"leading space":      " a",
		"trailing space":     "a ",
		"no-break space":     "a\u00a0b",
		"line separator":     "a\u2028b",
		"surrogate encoding": "\xed\xa0\x80",
	}
	for name, id := range bad {
		t.Run(name, func(t *testing.T) {
			err := courier.CheckID("biz_id", id)
			require.Error(t, err)
			require.Equal(t, courier.CodeInvalid, courier.ErrorCode(err))
			var ce *courier.Error
			require.ErrorAs(t, err, &ce)
			require.Equal(t, "biz_id", ce.Details["field"], "the error names the field")
		})
	}
}

func TestEscapeID(t *testing.T) {
	require.Equal(t, "order-42", courier.EscapeID("order-42"), "ASCII ids are unchanged")
	require.Equal(t, "order:42 a", courier.EscapeID("order:42 a"))
	require.Equal(t, "%D0%B7-1", courier.EscapeID("з-1"))
	require.Equal(t, "a%25b", courier.EscapeID("a%b"), "'%' is escaped, so no two ids share a form")
	require.NotEqual(t, courier.EscapeID("з"), courier.EscapeID("%D0%B7"))
}

func TestValidName(t *testing.T) {
	for _, n := range []string{"orders", "a", "0", "a.b-c_d", strings.Repeat("a", 64)} {
		require.True(t, courier.ValidName(n), n)
	}
	for _, n := range []string{"", "A", "-a", ".", "..", "a/b", "a b", "é", strings.Repeat("a", 65), "a\x00"} {
		require.False(t, courier.ValidName(n), "%q", n)
		require.Equal(t, courier.CodeInvalid, courier.ErrorCode(courier.CheckName("name", n)))
	}
}

// FuzzCheckID: an id the rule accepts is printable UTF-8 within the limit, and its escaped form
// is printable ASCII that decodes back to exactly the id (so Temporal can carry it and no two ids
// collide).
func FuzzCheckID(f *testing.F) {
	for _, s := range []string{"order-42", "заказ-✓", "a%b", "a/b", "..", "a\x00", "\xff", " a", "😀", "%D0%B7", "a\u202e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if courier.CheckID("id", id) != nil {
			return
		}
		if id == "" || len(id) > courier.MaxIDBytes || !utf8.ValidString(id) || strings.Contains(id, "/") || id == "." || id == ".." {
			t.Fatalf("accepted %q", id)
		}
		esc := courier.EscapeID(id)
		for i := 0; i < len(esc); i++ {
			if esc[i] < 0x20 || esc[i] > 0x7e {
				t.Fatalf("escaped form %q of %q is not printable ASCII", esc, id)
			}
		}
		back, err := url.PathUnescape(esc)
		if err != nil || back != id {
			t.Fatalf("escaped form %q of %q decodes to %q (%v)", esc, id, back, err)
		}
	})
}
