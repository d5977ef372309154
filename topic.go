package courier

import (
	"fmt"
	"net/textproto"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits of the message rule (topics, keys and headers of what courier publishes).
const (
	MaxTopicBytes       = 255
	MaxKeyBytes         = 255
	MaxHeaders          = 32
	MaxHeaderNameBytes  = 64
	MaxHeaderValueBytes = 4096
)

// ReservedHeaderPrefixes start header names producers may not set: brokers act on them
// (NATS JetStream's Nats-Msg-Id, Nats-Rollup, Nats-Expected-*, Nats-TTL, …: a message could
// purge a stream or defeat deduplication), or courier sets them itself (Courier-Message-Id,
// Courier-Key). Compared without regard to case.
var ReservedHeaderPrefixes = []string{"nats-", "courier-"}

func refuse(field, format string, args ...any) error {
	return &Error{Code: CodeInvalid, Message: fmt.Sprintf(format, args...), Details: map[string]any{"field": field}}
}

// CheckTopic applies the topic rule: 1 to MaxTopicBytes bytes of tokens made of A-Z, a-z,
// 0-9, '_' and '-', separated by single dots ("orders.created"). No wildcards, no spaces, no
// '$' (broker control subjects such as $JS.API.…, $KV.…, $SYS.…), and the first token is never
// _INBOX (reply subjects). Every broker courier publishes to accepts such a topic as an
// ordinary destination. A refusal is invalid_argument naming field.
func CheckTopic(field, topic string) error {
	if topic == "" {
		return refuse(field, "%s is required", field)
	}
	if len(topic) > MaxTopicBytes {
		return refuse(field, "%s is %d bytes; the limit is %d", field, len(topic), MaxTopicBytes)
	}
	for i, tok := range strings.Split(topic, ".") {
		if tok == "" {
			return refuse(field, "%s %q has an empty token (a leading, trailing or doubled '.')", field, topic)
		}
		if i == 0 && tok == "_INBOX" {
			return refuse(field, "%s %q is a reply subject (_INBOX.…), not a destination", field, topic)
		}
		for _, r := range tok {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
				if r == '$' {
					return refuse(field, "%s %q is a broker control subject ($…); courier never publishes to one", field, topic)
				}
				return refuse(field, "%s %q contains %q; topics are tokens of A-Z, a-z, 0-9, '_', '-' separated by '.'", field, topic, r)
			}
		}
	}
	return nil
}

// CheckKey checks a message key: at most MaxKeyBytes bytes of printable UTF-8 (empty means
// none).
func CheckKey(field, key string) error {
	if len(key) > MaxKeyBytes {
		return refuse(field, "%s is %d bytes; the limit is %d", field, len(key), MaxKeyBytes)
	}
	if err := printable(key); err != "" {
		return refuse(field, "%s %s", field, err)
	}
	return nil
}

// CheckHeaders checks producer headers: at most MaxHeaders, names of HTTP token characters
// (letters, digits and !#$%&'*+-.^_`|~) that are unique regardless of case and do not start with
// a ReservedHeaderPrefix, values of printable UTF-8 up to MaxHeaderValueBytes.
func CheckHeaders(field string, headers map[string]string) error {
	if len(headers) > MaxHeaders {
		return refuse(field, "%s has %d entries; the limit is %d", field, len(headers), MaxHeaders)
	}
	seen := make(map[string]bool, len(headers))
	for name, value := range headers {
		if name == "" || len(name) > MaxHeaderNameBytes || !isToken(name) {
			return refuse(field, "%s: header name %q must be 1-%d token characters (letters, digits, !#$%%&'*+-.^_`|~)", field, name, MaxHeaderNameBytes)
		}
		lower := strings.ToLower(name)
		for _, p := range ReservedHeaderPrefixes {
			if strings.HasPrefix(lower, p) {
				return refuse(field, "%s: header %q is reserved (names starting with Nats- or Courier- change how the broker or courier handles the message)", field, name)
			}
		}
		canon := textproto.CanonicalMIMEHeaderKey(name)
		if seen[canon] {
			return refuse(field, "%s: header %q is given twice (names are compared without regard to case)", field, name)
		}
		seen[canon] = true
		if len(value) > MaxHeaderValueBytes {
			return refuse(field, "%s: header %q is %d bytes; the limit is %d", field, name, len(value), MaxHeaderValueBytes)
		}
		if err := printable(value); err != "" {
			return refuse(field, "%s: header %q %s", field, name, err)
		}
	}
	return nil
}

// CheckMessage applies the topic, key and header rules to one message, as every entry point
// (the API, producers' rows read by the relay, business-type config, the publishers) does.
func CheckMessage(topic, key string, headers map[string]string) error {
	if err := CheckTopic("topic", topic); err != nil {
		return err
	}
	if err := CheckKey("key", key); err != nil {
		return err
	}
	return CheckHeaders("headers", headers)
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// printable returns "" when s is UTF-8 without control characters, or why not.
func printable(s string) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Sprintf("contains the control character %U", r)
		}
	}
	return ""
}
