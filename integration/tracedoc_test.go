package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The span trees docs/tracing.md draws are recorded by the tracing tests, not written by hand:
// each is a text block after a marker line
//
//	<!-- recorded by TestTrace…: <name> -->
//
// which the test that records it compares with the trace it saw. COURIER_RECORD_TRACES=1
// rewrites the blocks from the traces instead.
const recordTracesEnv = "COURIER_RECORD_TRACES"

var tracingDoc = filepath.Join("..", "docs", "tracing.md")

// traceBlock finds the text block recorded as name in doc: the offsets of its body.
func traceBlock(doc, name string) (start, end int, ok bool) {
	re := regexp.MustCompile(`<!-- recorded by TestTrace\w+: ` + regexp.QuoteMeta(name) + ` -->\n` + "```text\n")
	loc := re.FindStringIndex(doc)
	if loc == nil {
		return 0, 0, false
	}
	close := strings.Index(doc[loc[1]:], "```\n")
	if close < 0 {
		return 0, 0, false
	}
	return loc[1], loc[1] + close, true
}

// drawTrace draws one trace's spans as a tree: children in the order they started, each name
// passed through rename (which puts the doc's placeholders for a test's topics and names).
func drawTrace(spans tracetest.SpanStubs, rename *strings.Replacer) string {
	ids := map[trace.SpanID]bool{}
	children := map[trace.SpanID][]tracetest.SpanStub{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = true
	}
	var roots []tracetest.SpanStub
	for _, s := range spans {
		if s.Parent.IsValid() && ids[s.Parent.SpanID()] {
			children[s.Parent.SpanID()] = append(children[s.Parent.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(a, b tracetest.SpanStub) int {
		if c := a.StartTime.Compare(b.StartTime); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	}
	var b strings.Builder
	var draw func(s tracetest.SpanStub, prefix, branch, next string)
	draw = func(s tracetest.SpanStub, prefix, branch, next string) {
		b.WriteString(prefix + branch + rename.Replace(s.Name) + "\n")
		kids := children[s.SpanContext.SpanID()]
		slices.SortFunc(kids, byStart)
		for i, k := range kids {
			if i == len(kids)-1 {
				draw(k, prefix+next, "└─ ", "   ")
			} else {
				draw(k, prefix+next, "├─ ", "│  ")
			}
		}
	}
	slices.SortFunc(roots, byStart)
	for _, r := range roots {
		draw(r, "", "", "")
	}
	return b.String()
}

// requireDocumentedTrace checks that the trace drawn as name in docs/tracing.md is the one the
// test saw, waiting for spans still to end (they are exported as they end); with
// COURIER_RECORD_TRACES=1 it writes the trace there instead, once no span has been added for a
// second.
func requireDocumentedTrace(t *testing.T, exp *traceExporter, id trace.TraceID, name string, rename *strings.Replacer) {
	t.Helper()
	raw, err := os.ReadFile(tracingDoc)
	require.NoError(t, err)
	doc := string(raw)
	start, end, ok := traceBlock(doc, name)
	require.True(t, ok, "docs/tracing.md has no block recorded as %q", name)
	if os.Getenv(recordTracesEnv) != "" {
		got := settledTrace(exp, id, rename)
		docMu.Lock()
		defer docMu.Unlock()
		raw, err := os.ReadFile(tracingDoc) // again: another test may have written its block
		require.NoError(t, err)
		doc = string(raw)
		start, end, _ = traceBlock(doc, name)
		require.NoError(t, os.WriteFile(tracingDoc, []byte(doc[:start]+got+doc[end:]), 0o644))
		return
	}
	want := doc[start:end]
	var got string
	deadline := time.Now().Add(10 * time.Second)
	for {
		got = drawTrace(exp.spans(id), rename)
		if got == want || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // spans are exported as they end: poll until the tree is whole
	}
	require.Equal(t, want, got, "docs/tracing.md draws the %s trace other than it is (%s=1 re-records it)", name, recordTracesEnv)
}

// settledTrace draws a trace once no span has been added to it for a second.
func settledTrace(exp *traceExporter, id trace.TraceID, rename *strings.Replacer) string {
	n, since := -1, time.Now()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if m := len(exp.spans(id)); m != n {
			n, since = m, time.Now()
		} else if time.Since(since) > time.Second {
			break
		}
	}
	return drawTrace(exp.spans(id), rename)
}

// docMu keeps tests that record their blocks from writing docs/tracing.md at once.
var docMu sync.Mutex

// TestTraceDocBlocksAreRecorded: every tree docs/tracing.md draws under a "recorded by" marker
// names a tracing test that exists, so no hand-written tree passes for a recorded one.
func TestTraceDocBlocksAreRecorded(t *testing.T) {
	raw, err := os.ReadFile(tracingDoc)
	require.NoError(t, err)
	src, err := os.ReadFile("tracing_test.go")
	require.NoError(t, err)
	marks := regexp.MustCompile(`<!-- recorded by (TestTrace\w+): ([\w -]+) -->`).FindAllStringSubmatch(string(raw), -1)
	require.NotEmpty(t, marks)
	for _, m := range marks {
		require.Contains(t, string(src), "func "+m[1]+"(", "docs/tracing.md names a test that does not exist")
		require.Contains(t, string(src), fmt.Sprintf("%q", m[2]), "%s does not record the block %q", m[1], m[2])
	}
}
