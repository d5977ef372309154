package mq

import (
	"net/url"
	"strings"
)

// Scheme returns the lower-cased scheme of a broker URL ("" when it has none).
func Scheme(rawURL string) string {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return ""
	}
	return strings.ToLower(scheme)
}

// RedactURL returns rawURL with its password (in the user info, or a password= option)
// replaced by "xxxxx", for logs, errors and status pages. A URL it cannot read is replaced
// whole by its scheme.
func RedactURL(rawURL string) string {
	if parts := strings.Split(rawURL, ","); strings.Count(rawURL, "://") > 1 { // nats://a,nats://b
		for i, p := range parts {
			parts[i] = RedactURL(p)
		}
		return strings.Join(parts, ",")
	}
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return "<broker URL without scheme>"
	}
	// Not url.Parse: a Kafka URL lists several hosts, which it refuses.
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo := authority[:at]
		if user, _, hasPass := strings.Cut(userinfo, ":"); hasPass {
			userinfo = user + ":xxxxx"
		}
		authority = userinfo + "@" + authority[at+1:]
	}
	path, query, hasQuery := strings.Cut(tail, "?")
	if hasQuery {
		query, fragment, hasFragment := strings.Cut(query, "#")
		parts := strings.Split(query, "&")
		for i, p := range parts {
			name, _, _ := strings.Cut(p, "=")
			if n, err := url.QueryUnescape(name); err == nil && strings.EqualFold(n, "password") {
				parts[i] = name + "=xxxxx"
			}
		}
		tail = path + "?" + strings.Join(parts, "&")
		if hasFragment {
			tail += "#" + fragment
		}
	}
	return scheme + "://" + authority + tail
}
