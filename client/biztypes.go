package client

import (
	"context"
	"net/http"

	"github.com/courier-oss/courier/api"
)

// BizTypeConfig is a business type's configuration (PUT /v1/biz-types/{name}, scope admin).
type BizTypeConfig = api.BizTypeConfig

// BizType is a business type as the API shows it; Created says the PUT created it.
type BizType = api.BizType

// PutBizType creates or replaces a business type (scope admin).
func (c *Client) PutBizType(ctx context.Context, name string, cfg BizTypeConfig) (*BizType, error) {
	out, st, err := fetchStatus[BizType](ctx, c, call{method: http.MethodPut, path: "/v1/biz-types/" + seg(name), body: cfg, idempotent: true})
	if err != nil {
		return nil, err
	}
	out.Created = st == http.StatusCreated
	return out, nil
}

// GetBizType reads one business type (scope admin).
func (c *Client) GetBizType(ctx context.Context, name string) (*BizType, error) {
	return fetch[BizType](ctx, c, call{method: http.MethodGet, path: "/v1/biz-types/" + seg(name), idempotent: true})
}

// ListBizTypes reads every business type (scope admin).
func (c *Client) ListBizTypes(ctx context.Context) ([]BizType, error) {
	return allByName[BizType](ctx, c, "/v1/biz-types")
}

// DeleteBizType removes a business type (scope admin).
func (c *Client) DeleteBizType(ctx context.Context, name string) error {
	_, err := c.do(ctx, call{method: http.MethodDelete, path: "/v1/biz-types/" + seg(name), idempotent: true})
	return err
}
