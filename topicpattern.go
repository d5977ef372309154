package courier

import "strings"

// CheckTopicPattern applies the topic rule to a topic pattern (bulk redrive's filter): NATS
// style, tokens separated by dots, where a token may be `*` (exactly one token) and the last
// token may be `>` (one or more tokens). `orders.*` matches `orders.created` but not `orders`
// or `orders.created.eu`; `orders.>` matches both of the longer ones.
func CheckTopicPattern(field, pattern string) error {
	if pattern == "" || len(pattern) > MaxTopicBytes {
		return refuse(field, "%s must be 1 to %d bytes; got %d", field, MaxTopicBytes, len(pattern))
	}
	toks := strings.Split(pattern, ".")
	for i, tok := range toks {
		switch {
		case tok == "*":
		case tok == ">" && i == len(toks)-1:
		case tok != "" && strings.Trim(tok, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == "":
		default:
			return refuse(field, "%s %q: each dot-separated token is letters, digits, '_' or '-', or the wildcard '*', or '>' as the last token", field, pattern)
		}
	}
	return nil
}

// MatchTopic reports whether topic matches a pattern of CheckTopicPattern.
func MatchTopic(pattern, topic string) bool {
	pt, tt := strings.Split(pattern, "."), strings.Split(topic, ".")
	for i, p := range pt {
		if p == ">" {
			return len(tt) > i
		}
		if i >= len(tt) || (p != "*" && p != tt[i]) {
			return false
		}
	}
	return len(pt) == len(tt)
}

// TopicPatternPrefix is the literal part of a pattern before its first wildcard: every topic
// the pattern matches starts with it.
func TopicPatternPrefix(pattern string) string {
	i := strings.IndexAny(pattern, "*>")
	if i < 0 {
		return pattern
	}
	return pattern[:i]
}
