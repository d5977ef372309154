package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun/schema"

	"github.com/courier-oss/courier"
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

// querier is the method of *sql.Tx and bun's handles that Enqueue uses, when tx has it, to
// insert many messages with one INSERT ... RETURNING.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// bunFormatter is satisfied by bun's handles, which format "?" placeholders themselves.
type bunFormatter interface {
	Dialect() schema.Dialect
}

// Limits of one multi-row INSERT. 500 rows are 2,000 parameters, far below PostgreSQL's 65,535
// and SQLite's 32,766; the byte bound keeps a run of large payloads from making one huge
// statement (bun writes the values into the SQL text, PostgreSQL refuses statements of 1 GB).
const (
	maxInsertRows  = 500
	maxInsertBytes = 16 << 20 // payload bytes; a statement holds at least one message
)

// columns is how many values one message inserts (insertSQL's column list).
const columns = 4

// Enqueue inserts the messages into the outbox inside tx and returns their ids in order. Call
// it in the same transaction as the business change; nothing is published unless that
// transaction commits. Every message is checked before any is inserted: one that breaks the
// rules fails the call and nothing is written. Many messages go out in few statements (up to
// 500 rows each) when tx has QueryContext, as *sql.Tx and bun's handles do. When ctx carries
// an OpenTelemetry span, each row's headers get its traceparent (and tracestate), unless the
// message sets its own: the delivery continues the producer's trace.
func Enqueue(ctx context.Context, tx Tx, msgs ...Message) ([]int64, error) {
	if tx == nil {
		return nil, errors.New("outbox: nil transaction")
	}
	args := make([]any, 0, columns*len(msgs))
	for i, m := range msgs {
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("outbox: message %d: %w", i, err)
		}
		m.Headers = traceHeaders(ctx, m.Headers)
		var headers any
		if len(m.Headers) > 0 {
			b, err := json.Marshal(m.Headers)
			if err != nil {
				return nil, err
			}
			headers = string(b)
		}
		args = append(args, m.Topic, m.Key, m.Payload, headers)
	}
	_, isBun := tx.(bunFormatter)
	q, ok := tx.(querier)
	if !ok {
		return insertEach(ctx, tx, isBun, args)
	}
	ids := make([]int64, 0, len(msgs))
	for first := 0; first < len(msgs); {
		n := statementRows(msgs[first:])
		got, err := insertMany(ctx, q, isBun, args[columns*first:columns*(first+n)])
		if err != nil {
			return nil, err
		}
		ids = append(ids, got...)
		first += n
	}
	return ids, nil
}

// statementRows is how many of msgs (at least one) the next INSERT takes, within the limits of
// one statement.
func statementRows(msgs []Message) int {
	size := 0
	for i, m := range msgs {
		size += len(m.Payload)
		if i == maxInsertRows || (i > 0 && size > maxInsertBytes) {
			return i
		}
	}
	return len(msgs)
}

// insertEach inserts one row per statement, for a Tx without QueryContext.
func insertEach(ctx context.Context, tx Tx, isBun bool, args []any) ([]int64, error) {
	q := insertSQL(isBun, 1)
	ids := make([]int64, len(args)/columns)
	for i := range ids {
		if err := tx.QueryRowContext(ctx, q, args[columns*i:columns*(i+1)]...).Scan(&ids[i]); err != nil {
			return nil, fmt.Errorf("outbox: insert: %w", err)
		}
	}
	return ids, nil
}

// insertMany inserts the rows whose values args holds with one statement and returns their ids
// in row order.
func insertMany(ctx context.Context, q querier, isBun bool, args []any) ([]int64, error) {
	n := len(args) / columns
	rows, err := q.QueryContext(ctx, insertSQL(isBun, n), args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: insert: %w", err)
	}
	defer rows.Close()
	ids := make([]int64, 0, n)
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("outbox: insert: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: insert: %w", err)
	}
	if len(ids) != n {
		return nil, fmt.Errorf("outbox: insert returned %d ids for %d rows", len(ids), n)
	}
	// RETURNING promises no row order (SQLite documents its order as arbitrary), but the ids
	// themselves ascend in row order: one statement inserts its VALUES rows in list order, and
	// each row takes its id as it is inserted, from PostgreSQL's sequence (nextval only ever
	// grows, whatever other sessions take in between) or from SQLite's AUTOINCREMENT (one past
	// the largest id ever used, under the database's single write lock). So the sorted ids are
	// the rows' ids in order.
	slices.Sort(ids)
	return ids, nil
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

// insertSQL is the INSERT of rows messages: "?" placeholders for bun, which formats them
// itself, and $1..$n for database/sql (lib/pq needs them; SQLite takes them too).
func insertSQL(questionMarks bool, rows int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO courier_outbox (topic, "key", payload, headers) VALUES `)
	for r := range rows {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for c := range columns {
			if c > 0 {
				b.WriteString(", ")
			}
			if questionMarks {
				b.WriteByte('?')
			} else {
				b.WriteString("$" + strconv.Itoa(columns*r+c+1))
			}
		}
		b.WriteByte(')')
	}
	b.WriteString(" RETURNING id")
	return b.String()
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

// TimerRow is the payload of a TimerTopic row (the relay reads it back).
type TimerRow struct {
	BizType string          `json:"biz_type"`
	BizID   string          `json:"biz_id"`
	FireAt  time.Time       `json:"fire_at"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// ArmTimer writes a row that makes courier's relay create the timer once tx commits. Creating
// is idempotent on (biz_type, biz_id), so a relay retry never arms twice.
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
	body, err := json.Marshal(TimerRow{BizType: t.BizType, BizID: t.BizID, FireAt: t.FireAt.UTC(), Payload: t.Payload})
	if err != nil {
		return 0, err
	}
	ids, err := Enqueue(ctx, tx, Message{Topic: TimerTopic, Key: t.BizType + "/" + t.BizID, Payload: body})
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}
