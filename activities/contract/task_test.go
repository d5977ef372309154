package contract_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
)

// Recorded task histories hold AttemptOutcome as JSON with its Go field names (the first two
// strings are from workflows/testdata/histories/task/failed.json and cancelled.json): the shape
// never changes, or those histories stop replaying the same.
func TestAttemptOutcomeJSON(t *testing.T) {
	for _, c := range []struct {
		out  contract.AttemptOutcome
		want string
	}{
		{contract.AttemptOutcome{Kind: courier.OutcomeFailure, StatusCode: 422, Message: "unparseable pdf",
			Result: json.RawMessage(`{"attempt":1,"task":"failed"}`), Recorded: true},
			`{"Kind":"failure","StatusCode":422,"Message":"unparseable pdf","Result":{"attempt":1,"task":"failed"},"Recorded":true}`},
		{contract.AttemptOutcome{Kind: courier.OutcomeCancelled, Message: "cancelled"},
			`{"Kind":"cancelled","StatusCode":0,"Message":"cancelled","Result":null}`},
		{contract.AttemptOutcome{Kind: courier.OutcomeTimeout, Trace: courier.TraceContext{Parent: "00-p-01", State: "s=1"}},
			`{"Kind":"timeout","StatusCode":0,"Message":"","Result":null,"Trace":{"traceparent":"00-p-01","tracestate":"s=1"}}`},
	} {
		b, err := json.Marshal(c.out)
		require.NoError(t, err)
		require.Equal(t, c.want, string(b))
		var back contract.AttemptOutcome
		require.NoError(t, json.Unmarshal([]byte(c.want), &back))
		if c.out.Result == nil {
			c.out.Result = json.RawMessage("null")
		}
		require.Equal(t, c.out, back)
	}
}
