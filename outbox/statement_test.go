package outbox

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// One INSERT takes at most maxInsertRows messages and, past the first, at most maxInsertBytes
// of payload.
func TestStatementRows(t *testing.T) {
	small := make([]Message, 1203)
	for i := range small {
		small[i].Payload = []byte("{}")
	}
	require.Equal(t, maxInsertRows, statementRows(small))
	require.Equal(t, 3, statementRows(small[:3]))

	large := make([]Message, 20)
	for i := range large {
		large[i].Payload = make([]byte, MaxPayloadBytes)
	}
	require.Equal(t, maxInsertBytes/MaxPayloadBytes, statementRows(large))

	huge := []Message{{Payload: make([]byte, maxInsertBytes+1)}, {Payload: []byte("{}")}}
	require.Equal(t, 1, statementRows(huge), "a statement holds at least one message")
}

func TestInsertSQL(t *testing.T) {
	require.Equal(t, `INSERT INTO courier_outbox (topic, "key", payload, headers) VALUES ($1, $2, $3, $4), ($5, $6, $7, $8) RETURNING id`,
		insertSQL(false, 2))
	require.Equal(t, `INSERT INTO courier_outbox (topic, "key", payload, headers) VALUES (?, ?, ?, ?) RETURNING id`,
		insertSQL(true, 1))
}
