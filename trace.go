package courier

// The W3C trace context headers (https://www.w3.org/TR/trace-context/). courier reads and writes
// them in outbox rows' headers, on the HTTP requests it makes and answers, and on the messages
// it publishes (docs/tracing.md). Producers in any language may set them; the topic/header rule
// allows them.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// TraceContext is a W3C trace context as it travels between processes and rests in rows: the
// traceparent and tracestate header values. The zero value is "no trace".
type TraceContext struct {
	Parent string `json:"traceparent,omitempty"`
	State  string `json:"tracestate,omitempty"`
}

// IsZero reports whether there is no trace context.
func (t TraceContext) IsZero() bool { return t.Parent == "" }
