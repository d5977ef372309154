package courier

import (
	"errors"
	"fmt"
	"time"
)

// Code is a stable, machine-readable error code. Clients branch on it; the gateway maps it to an
// HTTP status in exactly one table.
type Code string

// The error codes courier returns. They never change meaning once shipped.
const (
	CodeInvalid          Code = "invalid_argument"  // malformed request: JSON syntax, path or query
	CodeValidation       Code = "validation_failed" // well-formed body with invalid field values
	CodeNotFound         Code = "not_found"
	CodeConflict         Code = "conflict"
	CodeUnauthenticated  Code = "unauthenticated"
	CodePermissionDenied Code = "permission_denied"
	CodeTooLarge         Code = "payload_too_large"
	CodeUnavailable      Code = "unavailable"
	CodeMethodNotAllowed Code = "method_not_allowed"
	CodeRateLimited      Code = "rate_limited" // admission control: a key's request rate or an insert rate was exceeded
	CodeBacklogFull      Code = "backlog_full" // admission control: the queue already holds max_pending pending tasks
	CodeUnsupportedMedia Code = "unsupported_media_type"
	CodeInternal         Code = "internal"
)

// Error is an error with a stable code, a human message and optional structured details.
type Error struct {
	Code    Code
	Message string
	Details map[string]any
	// RetryAfter, when set, is when the same request may succeed (the gateway sends it as
	// Retry-After).
	RetryAfter time.Duration
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Errorf builds an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, or CodeInternal.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
