package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// Pause is a pause in force: a task queue, a business type or an outbox topic pattern held by
// an operator (docs/flow-control.md).
type Pause = api.Pause

// The kinds of pause.
const (
	PauseQueue   = courier.PauseQueue
	PauseBizType = courier.PauseBizType
	PauseTopic   = courier.PauseTopic
)

// Pause holds a task queue (kind PauseQueue), a business type (PauseBizType) or the outbox
// records of a topic pattern (PauseTopic, name "orders.>") and returns the pause in force: the
// one already there, unchanged, when it was paused before (POST /v1/pauses, scope admin).
// Work for it is still accepted and kept, and nothing of it is pushed, called back or
// published until Resume.
func (c *Client) Pause(ctx context.Context, kind courier.PauseKind, name, reason string) (*Pause, error) {
	req := api.PauseRequest{Kind: kind, Name: name, Reason: reason}
	return fetch[Pause](ctx, c, call{method: http.MethodPost, path: "/v1/pauses", body: req, idempotent: true})
}

// Resume lifts a pause and returns it, or an *Error with courier.CodeNotFound when kind's name
// is not paused (DELETE /v1/pauses/{kind}/{name}, scope admin). What waited is delivered at
// once.
func (c *Client) Resume(ctx context.Context, kind courier.PauseKind, name string) (*Pause, error) {
	path := "/v1/pauses/" + seg(string(kind)) + "/" + seg(name)
	return fetch[Pause](ctx, c, call{method: http.MethodDelete, path: path, idempotent: true})
}

// ListPauses reads every pause in force (GET /v1/pauses, scope admin).
func (c *Client) ListPauses(ctx context.Context) ([]Pause, error) {
	return allByName[Pause](ctx, c, "/v1/pauses")
}

// allByName reads every page of a list the gateway pages by name (GET /v1/biz-types,
// /v1/queues, /v1/pauses: limit and page_token like every list), the largest page at a time,
// and returns the items in the gateway's order. The list is bounded by what operators
// configure, so it is returned whole.
func allByName[T any](ctx context.Context, c *Client, path string) ([]T, error) {
	out := []T{}
	token := ""
	for {
		v := url.Values{"limit": {"1000"}}
		if token != "" {
			v.Set("page_token", token)
		}
		page, err := fetch[api.List[T]](ctx, c, call{method: http.MethodGet, path: path, query: v, idempotent: true})
		if err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if page.NextPageToken == "" || page.NextPageToken == token {
			return out, nil
		}
		token = page.NextPageToken
	}
}
