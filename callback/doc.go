// Package callback sends courier's signed HTTP callbacks safely: every dial is checked against
// the resolved address (loopback, private, link-local, CGNAT, metadata and other special-purpose
// ranges are refused unless allowed), odd numeric host spellings are refused up front, redirects
// are never followed, and the response is classified for retries (2xx done; 429, 5xx and
// timeouts retried, honouring Retry-After; other statuses permanent).
package callback
