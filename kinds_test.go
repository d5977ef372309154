package courier_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
)

// Each row of the table is whole: a kind name of its own, a workflow type, CourierKind first
// among registered search attributes whose values have the registered types, ids that read as
// the row says, and the task queue its rule names.
func TestKinds(t *testing.T) {
	ids := map[string][]string{ // ids each kind's id function writes
		"outbox":         {courier.OutboxWorkflowID(courier.DefaultSource, 42), courier.OutboxWorkflowID("", 42), courier.OutboxWorkflowID("shop", 42)},
		"outbox-batch":   {courier.OutboxBatchWorkflowID("", 7, 9), courier.OutboxBatchWorkflowID("shop", 7, 9)},
		"outbox-key":     {courier.OutboxKeyWorkflowID("", "k"), courier.OutboxKeyWorkflowID("shop", "k")},
		"timer":          {courier.TimerWorkflowID("orders", "o-1")},
		"rowless-timer":  {courier.TimerWorkflowID("orders", "o-1")},
		"timer-bucket":   {courier.TimerBucketWorkflowID("orders", 1795000000)},
		"bucketed-timer": {courier.TimerWorkflowID("orders", "o-1")},
		"schedule-run":   {courier.ScheduleID("nightly") + "-2026-11-22T02:00:00Z"}, // Temporal appends the nominal time
		"task":           {courier.TaskWorkflowID("doc-42", 3)},
		"task-batch":     {courier.TaskBatchWorkflowID("parse", "mx18a47u-31926cfc")},
		"task-sweeper":   {courier.TaskSweeperID},
	}
	names := map[string]bool{}
	for _, k := range courier.Kinds {
		require.False(t, names[k.Name], "%s is one kind", k.Name)
		names[k.Name] = true
		require.NotEmpty(t, k.Workflow, k.Name)
		require.Equal(t, courier.SAKind, k.Attributes[0], "%s: CourierKind first", k.Name)
		for _, a := range append(slices.Clone(k.Attributes), k.Updates...) {
			require.Contains(t, courier.SearchAttributes, a, "%s sets %s, which courier registers", k.Name, a)
		}
		start := k.StartAttributes(courier.RunAttributes{})
		require.Len(t, start, len(k.Attributes), k.Name)
		for name, value := range start {
			want := map[courier.SearchAttributeType]any{courier.SAKeyword: "", courier.SAInt: int64(0), courier.SADatetime: time.Time{}}[courier.SearchAttributes[name]]
			require.IsType(t, want, value, "%s: %s is a %s", k.Name, name, courier.SearchAttributes[name])
		}
		require.Equal(t, k.Name, start[courier.SAKind])

		scheme := regexp.MustCompile(`<[^>]+>`).ReplaceAllString(regexp.QuoteMeta(k.ID), `.+`)
		scheme = strings.ReplaceAll(scheme, `\<`, `<`) // QuoteMeta leaves < and > alone; keep the pattern plain
		re := regexp.MustCompile(`^(` + strings.ReplaceAll(scheme, " or ", "|") + `)$`)
		require.NotEmpty(t, ids[k.Name], "%s: an id to check", k.Name)
		for _, id := range ids[k.Name] {
			require.Regexp(t, re, id, "%s's id reads as its row says (%s)", k.Name, k.ID)
		}
	}
	require.Len(t, ids, len(courier.Kinds), "every kind's ids are checked")

	require.Equal(t, "courier-outbox", courier.KindOutbox.TaskQueue(courier.DefaultWorkflowQueue))
	require.Equal(t, "courier-task-push", courier.KindTask.TaskQueue(courier.DefaultWorkflowQueue))
	require.Equal(t, "bench-a-task-push", courier.KindTask.TaskQueue("bench-a"))
	require.Equal(t, "courier-task-finish", courier.TaskFinishQueue(""))
	require.Equal(t, "bench-a-task-finish", courier.TaskFinishQueue("bench-a"))
	require.Equal(t, "courier-biz-orders", courier.BizTypeTaskQueue("orders"))
	require.Equal(t, "CourierKind = 'timer'", courier.KindTimer.Query())
	require.Equal(t, "CourierKind IN ('timer-bucket', 'bucketed-timer')", courier.KindIn(courier.KindTimerBucket, courier.KindBucketedTimer))
}

// docRow is a kind's row of the table in docs/operations.md ("Workflow kinds").
func docRow(k courier.Kind) string {
	code := func(names []string) string {
		if len(names) == 0 {
			return "—"
		}
		out := make([]string, len(names))
		for i, n := range names {
			out[i] = "`" + n + "`"
		}
		return strings.Join(out, ", ")
	}
	ids := strings.Split(k.ID, " or ")
	for i, id := range ids {
		ids[i] = "`" + id + "`"
	}
	queue := "the workflows' queue (`" + k.TaskQueue(courier.DefaultWorkflowQueue) + "`)"
	if k.Queue != nil {
		queue = "`" + k.TaskQueue(courier.DefaultWorkflowQueue) + "` (beside the workflows' queue)"
	}
	return fmt.Sprintf("| `%s` | `%s` | %s | %s | %s | %s |", k.Name, k.Workflow, strings.Join(ids, " or "), queue, code(k.Attributes), code(k.Updates))
}

// The operators' guide lists the kinds as the table has them, row for row.
func TestKindsTableInTheDocs(t *testing.T) {
	raw, err := os.ReadFile("docs/operations.md")
	require.NoError(t, err)
	_, section, found := strings.Cut(string(raw), "\n### Workflow kinds\n")
	require.True(t, found, "docs/operations.md has a section \"Workflow kinds\"")
	lines := strings.Split(section, "\n")
	head := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "|---") })
	require.GreaterOrEqual(t, head, 0, "the section holds a table")
	var rows []string
	for _, line := range lines[head+1:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		rows = append(rows, line)
	}
	want := make([]string, len(courier.Kinds))
	for i, k := range courier.Kinds {
		want[i] = docRow(k)
	}
	require.Equal(t, want, rows, "docs/operations.md lists courier.Kinds (kinds.go); rewrite its rows as these")
}

// literalAllowed are string literals outside the table equal to a workflow type by chance: the
// same word naming something else. Each must still be found (a stale entry fails the test).
var literalAllowed = map[string][]string{
	"gateway/console_view.go":  {"task", "timer"}, // the console's page templates
	"gateway/console_pages.go": {"task", "timer"}, // the console's page templates
	"tasks/service.go":         {"task"},          // a trace link's label
	"bench/tasks.go":           {"task"},          // the bench's CPU line
	"bench/tasks_batched.go":   {"task"},          // the batched bench's CPU line
	"relay/relay.go":           {"timer"},         // the timer rows' name in the relay's logs
	"relay/tasks.go":           {"task"},          // the task rows' name in the relay's logs
	"cmd/courier/config.go":    {"outbox-batch"},  // a flag's name
}

// Workflow types and task queues are spelled in kinds.go only: everywhere else in courier's
// non-test Go they come from the table, so a kind's identity cannot drift. Visibility queries
// build their CourierKind filters from it too (no quoted kind or type in a string).
func TestNamesOnlyInTheTable(t *testing.T) {
	exact := map[string]string{
		courier.DefaultWorkflowQueue:                          "a task queue",
		courier.TaskPushQueue(courier.DefaultWorkflowQueue):   "a task queue",
		courier.TaskFinishQueue(courier.DefaultWorkflowQueue): "a task queue",
		strings.TrimPrefix(courier.TaskPushQueue("q"), "q"):   "a task queue's suffix",
		strings.TrimPrefix(courier.TaskFinishQueue("q"), "q"): "a task queue's suffix",
		courier.BizTypeTaskQueue(""):                          "the business types' task queue prefix",
	}
	var quoted []string
	for _, k := range courier.Kinds {
		exact[k.Workflow] = "a workflow type"
		for _, q := range []string{"'" + k.Workflow + "'", "'" + k.Name + "'"} {
			if !slices.Contains(quoted, q) {
				quoted = append(quoted, q)
			}
		}
	}
	found := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || path == "kinds.go" {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		path = filepath.ToSlash(path)
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			if what, ok := exact[s]; ok {
				if !slices.Contains(literalAllowed[path], s) {
					t.Errorf("%s spells %s, %q: take it from the table in kinds.go", path, what, s)
				}
				found[path] = append(found[path], s)
			}
			for _, q := range quoted {
				if strings.Contains(s, q) {
					t.Errorf("%s spells %s in a string: build the filter with courier.Kind.Query or KindIn", path, q)
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	for path, lits := range literalAllowed {
		for _, l := range lits {
			require.Contains(t, found[path], l, "%s no longer spells %q: drop it from literalAllowed", path, l)
		}
	}
}
