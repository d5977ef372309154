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
	var out BizType
	st, err := c.do(ctx, call{method: http.MethodPut, path: "/v1/biz-types/" + seg(name), body: cfg, idempotent: true, out: &out})
	if err != nil {
		return nil, err
	}
	out.Created = st == http.StatusCreated
	return &out, nil
}

// GetBizType reads one business type (scope admin).
func (c *Client) GetBizType(ctx context.Context, name string) (*BizType, error) {
	var out BizType
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/biz-types/" + seg(name), idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
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
