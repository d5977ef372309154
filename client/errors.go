package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// Error is a request the gateway refused (or that a proxy in front of it answered with an
// error status). Code is courier's stable error code; branch on it, or use errors.Is with the
// sentinels below. errors.Is also matches a *courier.Error with the same code.
type Error struct {
	StatusCode int            // the HTTP status, e.g. 404
	Code       courier.Code   // e.g. courier.CodeNotFound; derived from the status when the body has none
	Message    string         // the gateway's message
	Details    map[string]any // e.g. {"field": "biz_id"}, {"current_version": 3}
	// RetryAfter is the answer's Retry-After: when the same request may succeed (429, 503,
	// the 409 of a redrive whose run is still closing). Zero when the answer had none.
	RetryAfter time.Duration
	Method     string // the request's method and path, for the message
	Path       string
}

// Error says what was asked and why it was refused.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("courier: ")
	if e.Method != "" {
		b.WriteString(e.Method + " " + e.Path + ": ")
	}
	if e.StatusCode != 0 {
		b.WriteString(strconv.Itoa(e.StatusCode) + " ")
	}
	b.WriteString(string(e.Code))
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

// Is reports whether target is an *Error (a sentinel such as ErrNotFound) or a *courier.Error
// with the same code. A target *Error with a StatusCode also has to match the status.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case *Error:
		return t.Code != "" && t.Code == e.Code && (t.StatusCode == 0 || t.StatusCode == e.StatusCode)
	case *courier.Error:
		return t.Code == e.Code
	}
	return false
}

// Field is the offending field or parameter the gateway named (details.field), or "".
func (e *Error) Field() string {
	s, _ := e.Details["field"].(string)
	return s
}

// Sentinels for errors.Is, one per code of docs/api.md.
var (
	ErrInvalid          = &Error{Code: courier.CodeInvalid}          // 400: malformed request, id, name, topic, page token
	ErrValidation       = &Error{Code: courier.CodeValidation}       // 422: well-formed values that are wrong
	ErrUnauthenticated  = &Error{Code: courier.CodeUnauthenticated}  // 401
	ErrPermissionDenied = &Error{Code: courier.CodePermissionDenied} // 403: the key lacks the route's scope
	ErrNotFound         = &Error{Code: courier.CodeNotFound}         // 404
	ErrMethodNotAllowed = &Error{Code: courier.CodeMethodNotAllowed} // 405
	ErrConflict         = &Error{Code: courier.CodeConflict}         // 409
	ErrTooLarge         = &Error{Code: courier.CodeTooLarge}         // 413
	ErrUnsupportedMedia = &Error{Code: courier.CodeUnsupportedMedia} // 415
	ErrRateLimited      = &Error{Code: courier.CodeRateLimited}      // 429: a key's request rate or an insert rate
	ErrBacklogFull      = &Error{Code: courier.CodeBacklogFull}      // 429: the queue's max_pending
	ErrUnavailable      = &Error{Code: courier.CodeUnavailable}      // 503: repeating the request is safe
	ErrInternal         = &Error{Code: courier.CodeInternal}         // 500 and anything unexpected
)

// newError reads a non-2xx answer.
func newError(method, path string, resp *http.Response, body []byte) *Error {
	e := &Error{StatusCode: resp.StatusCode, Method: method, Path: path, RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	var eb api.ErrorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error.Code != "" {
		e.Code, e.Message, e.Details = eb.Error.Code, eb.Error.Message, eb.Error.Details
		return e
	}
	e.Code = api.CodeOfStatus(resp.StatusCode)
	e.Message = http.StatusText(resp.StatusCode)
	if s := strings.TrimSpace(string(body)); s != "" {
		if len(s) > 200 {
			s = s[:200] + "…"
		}
		e.Message = fmt.Sprintf("%s (%s)", e.Message, s)
	}
	return e
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date; 0 when absent or
// unreadable.
func retryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}
