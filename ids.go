package courier

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxIDBytes bounds an id a caller chooses (a timer's biz_id, a task_id, a schedule id).
const MaxIDBytes = 128

// CheckID applies the id rule to an id a caller chooses: 1 to MaxIDBytes bytes of UTF-8 whose
// characters are all printable (letters, marks, numbers, punctuation, symbols and the ASCII
// space; no control or invisible formatting characters), without '/', without a leading or
// trailing space, and neither "." nor "..". Any id the rule allows works everywhere: in JSON
// bodies, percent-encoded in paths, and in Temporal (see EscapeID). A refusal is
// invalid_argument naming field.
func CheckID(field, id string) error {
	bad := func(why string) error {
		return &Error{Code: CodeInvalid, Message: fmt.Sprintf("%s %s; ids are 1-%d bytes of printable UTF-8 without '/', not \".\" or \"..\"", field, why, MaxIDBytes),
			Details: map[string]any{"field": field}}
	}
	switch {
	case id == "":
		return bad("is required")
	case len(id) > MaxIDBytes:
		return bad(fmt.Sprintf("is %d bytes long", len(id)))
	case !utf8.ValidString(id):
		return bad("is not valid UTF-8")
	case id == "." || id == "..":
		return bad("is a dot path segment")
	case id[0] == ' ' || id[len(id)-1] == ' ':
		return bad("starts or ends with a space")
	}
	for _, r := range id {
		switch {
		case r == '/':
			return bad("contains '/'")
		case !unicode.IsPrint(r):
			return bad(fmt.Sprintf("contains the unprintable character %U", r))
		}
	}
	return nil
}

// EscapeID is how an id appears inside a Temporal workflow or schedule id. Temporal sends those
// ids in gRPC headers, which carry printable ASCII only, so every byte outside printable ASCII
// and '%' itself is percent-encoded: ASCII ids stay as they are, "заказ-1" becomes
// "%D0%B7%D0%B0%D0%BA%D0%B0%D0%B7-1", and no two ids share an escaped form. The search
// attributes keep the id as given, so the Temporal UI finds it by its real value.
func EscapeID(id string) string {
	if !needsEscape(id) {
		return id
	}
	var b strings.Builder
	b.Grow(len(id) * 3)
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c < 0x20 || c >= 0x7f || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '%' {
			return true
		}
	}
	return false
}

// MaxNameBytes bounds a configuration name.
const MaxNameBytes = 64

var nameRule = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// ValidName reports whether name follows the name rule for things an operator configures
// (business types, task queues, outbox sources, brokers): 1 to 64 of a-z, 0-9, '_', '.', '-',
// starting with a letter or digit. Names become parts of Temporal task queue names and metric
// labels, hence the narrower alphabet.
func ValidName(name string) bool { return nameRule.MatchString(name) }

// CheckName applies the name rule; a refusal is invalid_argument naming field.
func CheckName(field, name string) error {
	if ValidName(name) {
		return nil
	}
	return &Error{Code: CodeInvalid,
		Message: fmt.Sprintf("%s must be 1-%d of a-z, 0-9, '_', '.', '-', starting with a letter or digit", field, MaxNameBytes),
		Details: map[string]any{"field": field}}
}

// CheckCallbackURL checks a URL courier will call (a business type's callback_url, a queue's
// push_url) before it is stored: absolute http or https, a host, no user info (a password in a
// URL would be stored and shown back), and no numeric host that is not a canonical IP address
// (decimal, octal or hex spellings such as 2130706433 or 0x7f.1, which some resolvers turn into
// internal addresses). Which addresses may be dialled is decided again at dial time. A refusal
// is validation_failed naming field.
func CheckCallbackURL(field, raw string) error {
	bad := func(why string) error {
		return &Error{Code: CodeValidation, Message: field + " " + why, Details: map[string]any{"field": field}}
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return bad("is not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("must be an absolute http or https URL")
	case u.User != nil:
		return bad("must not carry user info (user:password@); authenticate with the signature instead")
	case u.Hostname() == "":
		return bad("has no host")
	case u.Opaque != "":
		return bad("must be an absolute http or https URL")
	}
	if _, err := netip.ParseAddr(u.Hostname()); err != nil && looksNumeric(u.Hostname()) {
		return bad(fmt.Sprintf("host %q is not a canonical IP address", u.Hostname()))
	}
	return nil
}

// looksNumeric reports hosts made only of digits, dots and hex markers ("2130706433",
// "0177.0.0.1", "0x7f.1"): no real DNS name looks like that.
func looksNumeric(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "" {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" {
			return false
		}
		hex, isHex := strings.CutPrefix(label, "0x")
		for _, c := range hex {
			if !(c >= '0' && c <= '9' || isHex && c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}
