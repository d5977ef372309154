package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// blockedCursor is what a blocked-keys page token carries: the last key of the page and the
// source it belongs to.
type blockedCursor struct {
	V      int    `json:"v"`
	After  string `json:"after"`
	Source string `json:"source"`
}

// listBlockedKeys pages through the ordered mode's blocked keys by key, at most limit (default
// 100, at most 1000) per page.
func (h *handlers) listBlockedKeys(c echo.Context) error {
	src, st, err := h.source(c)
	if err != nil {
		return err
	}
	limit, err := queryLimit(c)
	if err != nil {
		return err
	}
	after := ""
	if raw := c.QueryParam("page_token"); raw != "" {
		bad := &courier.Error{Code: courier.CodeInvalid, Message: "page_token is not a token this list returned for this query",
			Details: map[string]any{"field": "page_token"}}
		b, err := base64.RawURLEncoding.DecodeString(raw)
		if err != nil || len(b) > 2048 {
			return bad
		}
		var cur blockedCursor
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if dec.Decode(&cur) != nil || dec.More() || cur.V != 1 || cur.Source != src {
			return bad
		}
		after = cur.After
	}
	keys, more, err := st.BlockedKeys(c.Request().Context(), after, limit)
	if err != nil {
		return err
	}
	page := api.BlockedKeyPage{Items: make([]api.BlockedKey, 0, len(keys))}
	for _, k := range keys {
		page.Items = append(page.Items, api.BlockedKeyOf(src, k))
	}
	if more && len(keys) > 0 {
		b, _ := json.Marshal(blockedCursor{V: 1, After: keys[len(keys)-1].Key, Source: src})
		page.NextPageToken = base64.RawURLEncoding.EncodeToString(b)
	}
	return c.JSON(http.StatusOK, page)
}

// skipOutbox skips the dead record a blocked key waits on: the record stays dead and the key's
// later records go out. A record that blocks no key is 409 conflict.
func (h *handlers) skipOutbox(c echo.Context) error {
	src, st, id, err := h.record(c)
	if err != nil {
		return err
	}
	b, err := h.skipRecord(c.Request().Context(), st, id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.BlockedKeyOf(src, b))
}

// skipRecord unblocks the key that record id of st blocks and wakes the relay, so the key's
// later records go out (the API's skip and the console's).
func (h *handlers) skipRecord(ctx context.Context, st OutboxStore, id int64) (courier.BlockedKey, error) {
	b, err := st.SkipBlocked(ctx, id)
	if err != nil {
		return b, err
	}
	if h.d.Wake != nil {
		h.d.Wake()
	}
	return b, nil
}
