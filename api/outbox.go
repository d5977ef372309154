package api

import (
	"encoding/json"
	"mime"
	"strings"
	"time"

	"github.com/courier-oss/courier"
)

// PublishRequest is the body of POST /v1/outbox (scope producer): one message for the outbox.
type PublishRequest struct {
	Topic   string            `json:"topic"`             // e.g. "orders.created" (docs/api.md: the topic rule)
	Key     string            `json:"key,omitempty"`     // optional partition/ordering key
	Payload json.RawMessage   `json:"payload"`           // required: any JSON value
	Headers map[string]string `json:"headers,omitempty"` // optional; no Nats-* or Courier-* names
}

// OutboxRecord is an outbox record as the API shows it. Payload is the payload as it was
// posted: the JSON value itself when PayloadEncoding is "json", a base64 string of the bytes
// when it is "base64" (PayloadData decodes either); lists leave it out unless asked
// (include_payload=true). PayloadBytes is always set.
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
	// WorkflowID is the Temporal workflow that delivered the record, is delivering it or tried
	// it last: outbox/<id> (its own), outbox-batch/<source>/<first>-<last> (batch mode) or
	// outbox-key/<key> (ordered mode); left out while no workflow has taken the record.
	WorkflowID string `json:"workflow_id,omitempty"`
	// Outcome is set on POST /v1/outbox's answer only: created (201), or existing (200: a
	// repeat of an earlier request with the same Idempotency-Key, answered with the record it
	// made, which is not published again).
	Outcome string `json:"outcome,omitempty"`
}

// The outcomes of POST /v1/outbox.
const (
	OutboxCreated  = "created"
	OutboxExisting = "existing"
)

// IdempotencyKeyHeader names the request header that makes an insert without a natural key safe
// to retry (POST /v1/outbox): a repeat with the same key answers what the first request did.
const IdempotencyKeyHeader = "Idempotency-Key"

// MaxIdempotencyKeyBytes bounds an Idempotency-Key.
const MaxIdempotencyKeyBytes = 255

// OutboxRecordOf shows a record of the named source.
func OutboxRecordOf(source string, r courier.OutboxRecord) OutboxRecord {
	payload, encoding := payloadOf(r.Payload, r.Headers)
	return OutboxRecord{
		Source: source, ID: r.ID, Topic: r.Topic, Key: r.Key, Payload: payload, PayloadEncoding: encoding,
		PayloadBytes: r.PayloadBytes, Headers: r.Headers, Status: r.Status, Attempts: r.Attempts,
		NextAttemptAt: r.NextAttemptAt, CreatedAt: r.CreatedAt, SentAt: r.SentAt, LastError: r.LastError,
		WorkflowID: r.RunID(source),
	}
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

// payloadOf shows a payload as it was posted: JSON bytes as the JSON value (a payload posted
// through POST /v1/outbox always is), anything else as a base64 string. Bytes a producer wrote
// with an explicit non-JSON Content-Type header keep that type and show as base64 even when
// they happen to parse as JSON.
func payloadOf(p []byte, headers map[string]string) (json.RawMessage, string) {
	if p == nil {
		return nil, ""
	}
	if json.Valid(p) && jsonContentType(headers) {
		return json.RawMessage(p), "json"
	}
	b, _ := json.Marshal(p) // a []byte marshals as a base64 string
	return b, "base64"
}

// jsonContentType reports whether headers declare no content type or a JSON one.
func jsonContentType(headers map[string]string) bool {
	for name, v := range headers {
		if !strings.EqualFold(name, "Content-Type") {
			continue
		}
		mt, _, err := mime.ParseMediaType(v)
		return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
	}
	return true
}

// OutboxPage is one page of records in ascending id order; pass NextPageToken as page_token
// for the next page (it is empty on the last).
type OutboxPage = List[OutboxRecord]

// RedriveFilter is the body of POST /v1/outbox/redrive (scope admin): which dead records to
// send again. Zero fields do not filter.
type RedriveFilter struct {
	Source     string     `json:"source,omitempty"`      // outbox source; "": courier's own
	Topic      string     `json:"topic,omitempty"`       // NATS-style pattern: "orders.*" (one token), "orders.>" (the rest)
	DeadAfter  *time.Time `json:"dead_after,omitempty"`  // went dead at or after
	DeadBefore *time.Time `json:"dead_before,omitempty"` // went dead before
	// Max is how many records to take at most, 1 to 10,000; left out: the gateway's default
	// (1,000). An explicit 0 is refused.
	Max *int `json:"max,omitempty"`
}

// RedriveResult says what a bulk redrive did: Done records made pending again, Skipped left
// dead because their last delivery run was still open (call again a second later).
type RedriveResult struct {
	BulkResult
}

// BlockedKey is an ordered key whose next record spent its retry budget (docs/flow-control.md,
// "Ordered keys in the outbox"): the record is dead and the key's later records wait behind it
// until it is redriven (POST /v1/outbox/{id}/redrive) or skipped (POST /v1/outbox/{id}/skip).
type BlockedKey struct {
	Source     string    `json:"source"`
	Key        string    `json:"key"`
	RecordID   int64     `json:"record_id"`   // the dead record the key waits on
	Topic      string    `json:"topic"`       // its topic
	Reason     string    `json:"reason"`      // its last error
	BlockedAt  time.Time `json:"blocked_at"`  // when it went dead
	Waiting    int64     `json:"waiting"`     // records of the key not yet sent
	WorkflowID string    `json:"workflow_id"` // the key's delivery run (outbox-key/…)
}

// BlockedKeyOf is the API's view of a blocked key of source.
func BlockedKeyOf(source string, b courier.BlockedKey) BlockedKey {
	return BlockedKey{Source: source, Key: b.Key, RecordID: b.RecordID, Topic: b.Topic, Reason: b.Reason,
		BlockedAt: b.BlockedAt, Waiting: b.Waiting, WorkflowID: courier.OutboxKeyWorkflowID(source, b.Key)}
}

// BlockedKeyPage is one page of blocked keys by key; NextPageToken is empty on the last.
type BlockedKeyPage = List[BlockedKey]
