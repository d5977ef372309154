package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/store/outboxsql"
	"github.com/courier-oss/courier/tracing"
)

// Message is one message to publish: Topic is the broker subject, Key an optional partition or
// ordering key, Payload the body, Headers optional broker headers.
type Message struct {
	Topic   string
	Key     string
	Payload []byte
	Headers map[string]string
}

// MaxPayloadBytes bounds one message's payload; Temporal and brokers reject larger ones.
const MaxPayloadBytes = 1 << 20

// Tx is what Enqueue writes through: a *sql.Tx, a bun.Tx, or any bun.IDB. Those also have
// QueryContext, which lets Enqueue insert many messages per statement; a Tx with
// QueryRowContext alone gets one statement per message.
type Tx interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Enqueue inserts the messages into the outbox inside tx and returns their ids in order. Call
// it in the same transaction as the business change; nothing is published unless that
// transaction commits. Every message is checked before any is inserted: one that breaks the
// rules fails the call and nothing is written. Many messages go out in few statements (up to
// 500 rows each, store/outboxsql) when tx has QueryContext, as *sql.Tx and bun's handles do.
// When ctx carries an OpenTelemetry span, each row's headers get its traceparent (and
// tracestate), unless the message sets its own: the delivery continues the producer's trace.
func Enqueue(ctx context.Context, tx Tx, msgs ...Message) ([]int64, error) {
	if tx == nil {
		return nil, errors.New("outbox: nil transaction")
	}
	rows := make([]outboxsql.Row, len(msgs))
	for i, m := range msgs {
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("outbox: message %d: %w", i, err)
		}
		rows[i] = outboxsql.Row{Topic: m.Topic, Key: m.Key, Payload: m.Payload, Headers: traceHeaders(ctx, m.Headers)}
	}
	return outboxsql.Insert(ctx, tx, rows)
}

// traceHeaders adds ctx's W3C trace context to a message's headers (traceparent, tracestate:
// the relay continues the trace from them, docs/tracing.md). Headers that already carry a
// traceparent keep it, and a trace context that would take them past the header limits is
// left out.
func traceHeaders(ctx context.Context, headers map[string]string) map[string]string {
	if !tracing.FromHeaders(headers).IsZero() {
		return headers
	}
	return tracing.WithHeaders(ctx, headers)
}

// Validate checks the message against the table contract: courier's topic, key and header
// rules (see courier.CheckMessage: no broker control subjects, no reserved headers) and the
// payload limit. The relay applies the same rules to rows it reads, so a row that breaks them
// ends dead instead of reaching the broker. Errors are *courier.Error values naming the field.
func (m Message) Validate() error {
	if err := courier.CheckMessage(m.Topic, m.Key, m.Headers); err != nil {
		return err
	}
	switch {
	case m.Payload == nil:
		return &courier.Error{Code: courier.CodeValidation, Message: "payload is required (use an empty slice for an empty body)",
			Details: map[string]any{"field": "payload"}}
	case len(m.Payload) > MaxPayloadBytes:
		return &courier.Error{Code: courier.CodeTooLarge, Message: fmt.Sprintf("payload is %d bytes; the limit is %d", len(m.Payload), MaxPayloadBytes),
			Details: map[string]any{"field": "payload", "limit_bytes": MaxPayloadBytes}}
	}
	return nil
}

// TimerTopic is the reserved topic of rows that arm a timer instead of publishing a message.
const TimerTopic = "courier.timer.arm"

// Timer arms a courier timer from the producer's own transaction: the timer exists if and
// only if the transaction commits ("create the order and arm its close-order timer").
type Timer struct {
	BizType string
	BizID   string
	FireAt  time.Time
	Payload json.RawMessage // JSON delivered with the callback; nil for none
}

// ArmTimer writes a row that makes courier's relay create the timer once tx commits. Creating
// is idempotent on (biz_type, biz_id), so a relay retry never arms twice. The row's payload is
// the body of POST /v1/timers with a fire time (api.TimerRequest).
func ArmTimer(ctx context.Context, tx Tx, t Timer) (int64, error) {
	if err := courier.CheckName("biz_type", t.BizType); err != nil {
		return 0, err
	}
	if err := courier.CheckID("biz_id", t.BizID); err != nil {
		return 0, err
	}
	if t.FireAt.IsZero() {
		return 0, errors.New("outbox: a timer needs fire_at")
	}
	if len(t.Payload) > 0 && !json.Valid(t.Payload) {
		return 0, errors.New("outbox: timer payload must be JSON")
	}
	body, err := json.Marshal(api.TimerRequest{BizType: t.BizType, BizID: t.BizID, When: api.At(t.FireAt.UTC()), Payload: t.Payload})
	if err != nil {
		return 0, err
	}
	ids, err := Enqueue(ctx, tx, Message{Topic: TimerTopic, Key: t.BizType + "/" + t.BizID, Payload: body})
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}
