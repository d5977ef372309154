package outboxsql

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// One INSERT takes at most MaxRows rows and, past the first, at most MaxBytes of payload.
func TestStatementRows(t *testing.T) {
	small := make([]Row, 1203)
	for i := range small {
		small[i].Payload = []byte("{}")
	}
	require.Equal(t, MaxRows, statementRows(small))
	require.Equal(t, 3, statementRows(small[:3]))

	const mib = 1 << 20 // outbox.MaxPayloadBytes
	large := make([]Row, 20)
	for i := range large {
		large[i].Payload = make([]byte, mib)
	}
	require.Equal(t, MaxBytes/mib, statementRows(large))

	huge := []Row{{Payload: make([]byte, MaxBytes+1)}, {Payload: []byte("{}")}}
	require.Equal(t, 1, statementRows(huge), "a statement holds at least one row")
}

func TestStatement(t *testing.T) {
	require.Equal(t, `INSERT INTO courier_outbox (topic, "key", payload, headers) VALUES ($1, $2, $3, $4), ($5, $6, $7, $8) RETURNING id`,
		statement(false, 2))
	require.Equal(t, `INSERT INTO courier_outbox (topic, "key", payload, headers) VALUES (?, ?, ?, ?) RETURNING id`,
		statement(true, 1))
}
