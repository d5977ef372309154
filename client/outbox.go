package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// PublishRequest is one message for the outbox (POST /v1/outbox, scope producer).
type PublishRequest = api.PublishRequest

// OutboxRecord is an outbox record as the API shows it (PayloadData decodes its payload). Its
// WorkflowID names the Temporal workflow that delivered it, is delivering it or tried it last,
// whichever the delivery mode: its own (outbox/<id>), its batch's (outbox-batch/…) or its key's
// (outbox-key/…); empty while no workflow has taken it. Open it in the Temporal UI, or pass it
// to the Temporal client's DescribeWorkflowExecution.
type OutboxRecord = api.OutboxRecord

// OutboxQuery selects records for ListOutbox. Zero fields do not filter.
type OutboxQuery struct {
	Source         string               // outbox source (a producer database); "": courier's own
	Status         courier.OutboxStatus // pending, dispatched, sent or dead
	Topic          string               // exact topic
	Limit          int                  // records per page, 1–1000; 0: the gateway's default (100)
	IncludePayload bool                 // fill OutboxRecord.Payload (a page then holds at most 4 MiB of payloads)
	PageToken      string               // OutboxPage.NextPageToken of the previous page
}

// OutboxPage is one page of records in ascending id order; NextPageToken is empty on the last.
type OutboxPage = api.OutboxPage

func sourceQuery(source string) url.Values {
	if source == "" {
		return nil
	}
	return url.Values{"source": {source}}
}

// Publish writes one outbox record through the gateway; courier delivers it like any row a
// producer writes itself. It sends a fresh Idempotency-Key, so its own retries (a lost answer,
// a 503) answer the record the first try wrote and never publish twice; OutboxRecord.Outcome
// says "existing" when a retry found it. A producer that retries across restarts of its own
// process keeps a key of its own and calls PublishWithKey.
func (c *Client) Publish(ctx context.Context, r PublishRequest) (*OutboxRecord, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("courier: an idempotency key: %w", err)
	}
	return c.PublishWithKey(ctx, hex.EncodeToString(b[:]), r)
}

// PublishWithKey is Publish under the producer's own idempotency key (1–255 printable ASCII
// characters, a UUID say): every request with that key and the same message, while the record
// is kept, answers the one record the first wrote; the same key with another message is a
// conflict (*Error with Code conflict).
func (c *Client) PublishWithKey(ctx context.Context, idempotencyKey string, r PublishRequest) (*OutboxRecord, error) {
	return fetch[OutboxRecord](ctx, c, call{method: http.MethodPost, path: "/v1/outbox", body: r, idempotent: true,
		header: http.Header{api.IdempotencyKeyHeader: {idempotencyKey}}})
}

// GetOutbox reads one record of source ("": courier's own outbox).
func (c *Client) GetOutbox(ctx context.Context, source string, id int64) (*OutboxRecord, error) {
	return fetch[OutboxRecord](ctx, c, call{method: http.MethodGet, path: "/v1/outbox/" + strconv.FormatInt(id, 10),
		query: sourceQuery(source), idempotent: true})
}

// ListOutbox reads one page of records; pass the page's NextPageToken as q.PageToken for the
// next one, or use AllOutbox.
func (c *Client) ListOutbox(ctx context.Context, q OutboxQuery) (*OutboxPage, error) {
	v := listQuery{}.text("source", q.Source).text("status", string(q.Status)).text("topic", q.Topic).
		text("page_token", q.PageToken).number("limit", q.Limit)
	if q.IncludePayload {
		v.text("include_payload", "true")
	}
	return fetch[OutboxPage](ctx, c, call{method: http.MethodGet, path: "/v1/outbox", query: url.Values(v), idempotent: true})
}

// AllOutbox yields every record q selects, page after page, starting at q.PageToken. It stops
// at the first error, which it yields.
func (c *Client) AllOutbox(ctx context.Context, q OutboxQuery) iter.Seq2[OutboxRecord, error] {
	return pages(&q.PageToken, func() (*api.List[OutboxRecord], error) { return c.ListOutbox(ctx, q) })
}

// RedriveOutbox sends a dead record of source ("": courier's own) again (scope admin). A
// record that is not dead is ErrConflict; one whose last delivery run is still closing is
// ErrConflict with RetryAfter set: call again after it.
func (c *Client) RedriveOutbox(ctx context.Context, source string, id int64) (*OutboxRecord, error) {
	return fetch[OutboxRecord](ctx, c, call{method: http.MethodPost, path: "/v1/outbox/" + strconv.FormatInt(id, 10) + "/redrive",
		query: sourceQuery(source)})
}

// RedriveFilter selects dead records for RedriveDead. Zero fields do not filter; Max nil takes
// the gateway's default (1,000).
type RedriveFilter = api.RedriveFilter

// RedriveResult says what RedriveDead did.
type RedriveResult = api.RedriveResult

// RedriveDead sends the dead records f matches again, in bounded batches (POST
// /v1/outbox/redrive, scope admin). Safe to retry: a repeat only redrives records still dead.
func (c *Client) RedriveDead(ctx context.Context, f RedriveFilter) (*RedriveResult, error) {
	return fetch[RedriveResult](ctx, c, call{method: http.MethodPost, path: "/v1/outbox/redrive", body: f, idempotent: true})
}

// BlockedKey is an ordered key waiting on a dead record (docs/flow-control.md, "Ordered keys
// in the outbox").
type BlockedKey = api.BlockedKey

// BlockedKeyPage is one page of blocked keys by key; NextPageToken is empty on the last.
type BlockedKeyPage = api.BlockedKeyPage

// BlockedKeysQuery selects a page of blocked keys. Zero fields take the defaults.
type BlockedKeysQuery struct {
	Source    string // outbox source; "": courier's own
	Limit     int    // keys per page, 1–1000; 0: the gateway's default (100)
	PageToken string // BlockedKeyPage.NextPageToken of the previous page
}

// BlockedKeys reads one page of the ordered mode's blocked keys (GET
// /v1/outbox/blocked-keys): each with the dead record it waits on and that record's last error.
func (c *Client) BlockedKeys(ctx context.Context, q BlockedKeysQuery) (*BlockedKeyPage, error) {
	v := listQuery{}.text("source", q.Source).text("page_token", q.PageToken).number("limit", max(q.Limit, 0))
	return fetch[BlockedKeyPage](ctx, c, call{method: http.MethodGet, path: "/v1/outbox/blocked-keys", query: url.Values(v), idempotent: true})
}

// SkipOutbox skips the dead record a blocked key waits on (POST /v1/outbox/{id}/skip, scope
// admin): the record stays dead, and the key's later records go out. To publish it instead,
// fix the cause and RedriveOutbox it: that unblocks the key too, with the record first.
func (c *Client) SkipOutbox(ctx context.Context, source string, id int64) (*BlockedKey, error) {
	return fetch[BlockedKey](ctx, c, call{method: http.MethodPost, path: "/v1/outbox/" + strconv.FormatInt(id, 10) + "/skip",
		query: sourceQuery(source)})
}
