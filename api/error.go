package api

import (
	"net/http"

	"github.com/courier-oss/courier"
)

// ErrorBody is the JSON shape of every error answer: {"error":{"code","message","details"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail carries a stable code (courier.Code), a message and optional details (the field
// a validation error names, a conflict's current version, a limit).
type ErrorDetail struct {
	Code    courier.Code   `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// List is the JSON of one page of every list: {"items":[…],"next_page_token":…}.
type List[T any] struct {
	Items         []T    `json:"items"`
	NextPageToken string `json:"next_page_token,omitempty"` // pass as page_token for the next page; absent on the last
}

// codeOfStatus is the one table from HTTP statuses back to courier's codes.
var codeOfStatus = map[int]courier.Code{
	http.StatusBadRequest:            courier.CodeInvalid,
	http.StatusUnauthorized:          courier.CodeUnauthenticated,
	http.StatusForbidden:             courier.CodePermissionDenied,
	http.StatusNotFound:              courier.CodeNotFound,
	http.StatusMethodNotAllowed:      courier.CodeMethodNotAllowed,
	http.StatusConflict:              courier.CodeConflict,
	http.StatusRequestEntityTooLarge: courier.CodeTooLarge,
	http.StatusUnsupportedMediaType:  courier.CodeUnsupportedMedia,
	http.StatusUnprocessableEntity:   courier.CodeValidation,
	http.StatusTooManyRequests:       courier.CodeRateLimited,
	http.StatusBadGateway:            courier.CodeUnavailable,
	http.StatusServiceUnavailable:    courier.CodeUnavailable,
	http.StatusGatewayTimeout:        courier.CodeUnavailable,
}

// CodeOfStatus names the code of an error answer whose body does not carry one (a proxy's 502,
// the HTTP server's own 404 or 405): the code the status stands for, CodeInternal for any
// other.
func CodeOfStatus(status int) courier.Code {
	if c, ok := codeOfStatus[status]; ok {
		return c
	}
	return courier.CodeInternal
}
