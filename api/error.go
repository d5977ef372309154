package api

import "github.com/courier-oss/courier"

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

// List is the JSON of a list that is not paged (queues, business types): {"items":[…]}.
type List[T any] struct {
	Items         []T    `json:"items"`
	NextPageToken string `json:"next_page_token,omitempty"` // pass as page_token for the next page; absent on the last
}
