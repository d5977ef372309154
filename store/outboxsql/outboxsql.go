package outboxsql

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/uptrace/bun/schema"
)

// Row is one outbox row as a producer writes it; the table fills in the rest (status pending,
// due now). Headers are stored as a JSON object, or NULL when there are none.
type Row struct {
	Topic   string
	Key     string
	Payload []byte
	Headers map[string]string
}

// Tx is what Insert writes through: a *sql.Tx, a bun.Tx, or any bun.IDB. Those also have
// QueryContext, which lets Insert write many rows per statement; a Tx with QueryRowContext
// alone gets one statement per row.
type Tx interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// querier is the method of *sql.Tx and bun's handles that Insert uses, when tx has it, to
// insert many rows with one INSERT ... RETURNING.
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
	MaxRows  = 500
	MaxBytes = 16 << 20 // payload bytes; a statement holds at least one row
)

// columns is how many values one row inserts (statement's column list).
const columns = 4

// Insert writes rows into courier_outbox inside tx and returns their ids in row order, in as
// few statements as the limits allow when tx has QueryContext (as *sql.Tx and bun's handles
// do). It checks nothing: the caller (outbox.Enqueue) validates the rows first.
func Insert(ctx context.Context, tx Tx, rows []Row) ([]int64, error) {
	args := make([]any, 0, columns*len(rows))
	for _, r := range rows {
		var headers any
		if len(r.Headers) > 0 {
			b, err := json.Marshal(r.Headers)
			if err != nil {
				return nil, err
			}
			headers = string(b)
		}
		args = append(args, r.Topic, r.Key, r.Payload, headers)
	}
	_, isBun := tx.(bunFormatter)
	q, ok := tx.(querier)
	if !ok {
		return insertEach(ctx, tx, isBun, args)
	}
	ids := make([]int64, 0, len(rows))
	for first := 0; first < len(rows); {
		n := statementRows(rows[first:])
		got, err := insertMany(ctx, q, isBun, args[columns*first:columns*(first+n)])
		if err != nil {
			return nil, err
		}
		ids = append(ids, got...)
		first += n
	}
	return ids, nil
}

// statementRows is how many of rows (at least one) the next INSERT takes, within the limits of
// one statement.
func statementRows(rows []Row) int {
	size := 0
	for i, r := range rows {
		size += len(r.Payload)
		if i == MaxRows || (i > 0 && size > MaxBytes) {
			return i
		}
	}
	return len(rows)
}

// insertEach inserts one row per statement, for a Tx without QueryContext.
func insertEach(ctx context.Context, tx Tx, isBun bool, args []any) ([]int64, error) {
	q := statement(isBun, 1)
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
	rows, err := q.QueryContext(ctx, statement(isBun, n), args...)
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

// statement is the INSERT of n rows, returning their ids: "?" placeholders for bun, which
// formats them itself, and $1..$n for database/sql (lib/pq needs them; SQLite takes them too).
// docs/outbox.md shows producers in other languages the same statement.
func statement(questionMarks bool, n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO courier_outbox (topic, "key", payload, headers) VALUES `)
	for r := range n {
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
