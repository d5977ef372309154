package client

import (
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/courier-oss/courier"
)

// PublishRequest is one message for the outbox (POST /v1/outbox, scope producer).
type PublishRequest struct {
	Topic   string            `json:"topic"`             // e.g. "orders.created" (docs/api.md: the topic rule)
	Key     string            `json:"key,omitempty"`     // optional partition/ordering key
	Payload json.RawMessage   `json:"payload"`           // required: any JSON value
	Headers map[string]string `json:"headers,omitempty"` // optional; no Nats-* or Courier-* names
}

// OutboxRecord is an outbox record as the API shows it. Payload is the payload as it was posted:
// the JSON value when PayloadEncoding is "json", a base64 string of the bytes when it is
// "base64" (PayloadData decodes either); lists leave it out unless OutboxQuery.IncludePayload.
// PayloadBytes is always set.
type OutboxRecord struct {
	Source          string               `json:"source"`
	ID              int64                `json:"id"`
	Topic           string               `json:"topic"`
	Key             string               `json:"key,omitempty"`
	Payload         json.RawMessage      `json:"payload,omitempty"`
	PayloadEncoding string               `json:"payload_encoding,omitempty"` // json or base64
	PayloadBytes    int                  `json:"payload_bytes"`
	Headers         map[string]string    `json:"headers,omitempty"`
	Status          courier.OutboxStatus `json:"status"` // pending, dispatched, sent, dead
	Attempts        int                  `json:"attempts"`
	NextAttemptAt   time.Time            `json:"next_attempt_at"`
	CreatedAt       time.Time            `json:"created_at"`
	SentAt          *time.Time           `json:"sent_at,omitempty"`
	LastError       string               `json:"last_error,omitempty"`
	WorkflowID      string               `json:"workflow_id"`
}

// PayloadData returns the payload's bytes as stored: the JSON itself, or the decoded base64.
func (r OutboxRecord) PayloadData() ([]byte, error) {
	if r.PayloadEncoding != "base64" {
		return r.Payload, nil
	}
	var b []byte
	err := json.Unmarshal(r.Payload, &b)
	return b, err
}

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
type OutboxPage struct {
	Items         []OutboxRecord `json:"items"`
	NextPageToken string         `json:"next_page_token,omitempty"`
}

func sourceQuery(source string) url.Values {
	if source == "" {
		return nil
	}
	return url.Values{"source": {source}}
}

// Publish writes one outbox record through the gateway; courier delivers it like any row a
// producer writes itself. Not retried on 503 or a lost answer (a repeat would publish twice).
func (c *Client) Publish(ctx context.Context, r PublishRequest) (*OutboxRecord, error) {
	var out OutboxRecord
	if _, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/outbox", body: r, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetOutbox reads one record of source ("": courier's own outbox).
func (c *Client) GetOutbox(ctx context.Context, source string, id int64) (*OutboxRecord, error) {
	var out OutboxRecord
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/outbox/" + strconv.FormatInt(id, 10),
		query: sourceQuery(source), idempotent: true, out: &out})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// ListOutbox reads one page of records; pass the page's NextPageToken as q.PageToken for the
// next one, or use AllOutbox.
func (c *Client) ListOutbox(ctx context.Context, q OutboxQuery) (*OutboxPage, error) {
	v := url.Values{}
	for k, s := range map[string]string{"source": q.Source, "status": string(q.Status), "topic": q.Topic, "page_token": q.PageToken} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.IncludePayload {
		v.Set("include_payload", "true")
	}
	var out OutboxPage
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/outbox", query: v, idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// AllOutbox yields every record q selects, page after page, starting at q.PageToken. It stops
// at the first error, which it yields.
func (c *Client) AllOutbox(ctx context.Context, q OutboxQuery) iter.Seq2[OutboxRecord, error] {
	return func(yield func(OutboxRecord, error) bool) {
		for {
			page, err := c.ListOutbox(ctx, q)
			if err != nil {
				yield(OutboxRecord{}, err)
				return
			}
			for _, r := range page.Items {
				if !yield(r, nil) {
					return
				}
			}
			if page.NextPageToken == "" {
				return
			}
			q.PageToken = page.NextPageToken
		}
	}
}

// RedriveOutbox sends a dead record of source ("": courier's own) again (scope admin). A
// record that is not dead is ErrConflict; one whose last delivery run is still closing is
// ErrConflict with RetryAfter set: call again after it.
func (c *Client) RedriveOutbox(ctx context.Context, source string, id int64) (*OutboxRecord, error) {
	var out OutboxRecord
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/outbox/" + strconv.FormatInt(id, 10) + "/redrive",
		query: sourceQuery(source), out: &out})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// RedriveFilter selects dead records for RedriveDead. Zero fields do not filter.
type RedriveFilter struct {
	Source     string     `json:"source,omitempty"`      // outbox source; "": courier's own
	Topic      string     `json:"topic,omitempty"`       // NATS-style pattern: "orders.*" (one token), "orders.>" (the rest)
	DeadSince  *time.Time `json:"dead_since,omitempty"`  // went dead at or after
	DeadBefore *time.Time `json:"dead_before,omitempty"` // went dead before
	Max        int        `json:"max,omitempty"`         // records to take at most, 1–10000; 0: the gateway's default (1000)
}

// RedriveResult says what RedriveDead did.
type RedriveResult struct {
	Redriven int  `json:"redriven"` // records made pending again
	Busy     int  `json:"busy"`     // matching records left dead because their last delivery run was still open; call again a second later
	More     bool `json:"more"`     // matching dead records remain beyond Max; call again for the next ones
}

// RedriveDead sends the dead records f matches again, in bounded batches (POST
// /v1/outbox/redrive, scope admin). Safe to retry: a repeat only redrives records still dead.
func (c *Client) RedriveDead(ctx context.Context, f RedriveFilter) (*RedriveResult, error) {
	var out RedriveResult
	if _, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/outbox/redrive", body: f, idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}
