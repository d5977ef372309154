package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// The commands in the README and docs/ either run here, as written, against a running courier
// (a block preceded by "<!-- run by TestDocsCommands: NAME -->", NAME a row of docRuns below),
// or say on their first line that they are an illustration ("# illustration: why"). The dated
// benchmark appendix says so once, at its top, for all of its commands.

// docBlock is one fenced code block of a document.
type docBlock struct {
	file  string
	line  int
	info  string // the fence's info string: sh, text, go, …
	body  string
	runBy string // the docRuns name of its marker, if any
}

func (b docBlock) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// shellBlock says whether a block holds commands.
func shellBlock(info string) bool {
	switch strings.Fields(info + " x")[0] {
	case "sh", "bash", "shell", "console", "zsh":
		return true
	}
	return false
}

const historyNote = "Every command\non this page is an illustration"

var runMarker = regexp.MustCompile(`^<!-- run by TestDocsCommands: ([a-z0-9-]+) -->$`)

// docBlocks reads every fenced block of the README and docs/, in order.
func docBlocks(t *testing.T) []docBlock {
	t.Helper()
	root := filepath.Join("..", "..")
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var out []docBlock
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, f)
		lines := strings.Split(string(raw), "\n")
		for i := 0; i < len(lines); i++ {
			info, ok := strings.CutPrefix(lines[i], "```")
			if !ok {
				continue
			}
			b := docBlock{file: rel, line: i + 1, info: strings.TrimSpace(info)}
			if i > 0 {
				if m := runMarker.FindStringSubmatch(lines[i-1]); m != nil {
					b.runBy = m[1]
				}
			}
			j := i + 1
			for j < len(lines) && !strings.HasPrefix(lines[j], "```") {
				j++
			}
			b.body = strings.Join(lines[i+1:min(j, len(lines))], "\n")
			out = append(out, b)
			i = j
		}
	}
	return out
}

func TestDocsCommandsAreRunOrMarked(t *testing.T) {
	t.Parallel()
	ran := map[string]int{}
	for _, b := range docBlocks(t) {
		if b.file == filepath.Join("docs", "benchmarks-history.md") {
			continue // its page note covers it (below)
		}
		require.NotEmpty(t, b.info, "%s: give every code block a language (sh, text, go, json, sql, yaml, …)", b)
		if !shellBlock(b.info) {
			require.Empty(t, b.runBy, "%s: only shell blocks are run", b)
			continue
		}
		if b.runBy != "" {
			_, ok := docRuns[b.runBy]
			require.True(t, ok, "%s: %q is not a row of docRuns in cmd/courier/docs_test.go", b, b.runBy)
			ran[b.runBy]++
			continue
		}
		first, _, _ := strings.Cut(strings.TrimSpace(b.body), "\n")
		require.True(t, strings.HasPrefix(first, "# illustration"),
			"%s: a command the tests do not run says so on its first line (# illustration: why), or gets a run marker and a row in docRuns:\n%s", b, b.body)
	}
	for name := range docRuns {
		require.Equal(t, 1, ran[name], "docRuns row %q marks exactly one block", name)
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "benchmarks-history.md"))
	require.NoError(t, err)
	require.Contains(t, string(raw), historyNote, "the benchmark appendix says its commands are illustrations")
}

// docEnv is what the documented commands run against.
type docEnv struct {
	dev    *devInstance
	worker string // a task worker that reports success
	hooks  string // a callback receiver
}

// docRun checks one documented block: before runs first, check looks at what it printed and
// at the courier it ran against.
type docRun struct {
	before func(t *testing.T, e *docEnv)
	check  func(t *testing.T, e *docEnv, out string)
}

func (e *docEnv) get(t *testing.T, path string, out any) int {
	return httpJSON(t, "GET", e.dev.gw+path, e.dev.key, nil, out)
}

func (e *docEnv) waitRecord(t *testing.T, id int64, status string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var r struct {
			Status string `json:"status"`
		}
		e.get(t, fmt.Sprintf("/v1/outbox/%d", id), &r)
		return r.Status == status
	}, time.Minute, 50*time.Millisecond, "outbox record %d becomes %s", id, status)
}

var docRuns = map[string]docRun{
	"readme-outbox-publish": {check: func(t *testing.T, e *docEnv, out string) {
		require.Contains(t, out, `"id":1,`)
		require.Contains(t, out, `"topic":"orders.created"`)
	}},
	"readme-outbox-dead": {
		before: func(t *testing.T, e *docEnv) { e.waitRecord(t, 1, "dead") },
		check: func(t *testing.T, e *docEnv, out string) {
			require.Contains(t, out, `"status":"dead"`)
			require.Contains(t, out, `"last_error":`)
		}},
	"readme-outbox-redrive": {
		before: func(t *testing.T, e *docEnv) {
			nc, err := nats.Connect(e.dev.nats)
			require.NoError(t, err)
			defer nc.Close()
			js, err := jetstream.New(nc)
			require.NoError(t, err)
			_, err = js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
			require.NoError(t, err)
		},
		check: func(t *testing.T, e *docEnv, out string) {
			require.Contains(t, out, `"status":"pending"`)
			e.waitRecord(t, 1, "sent")
		}},
	"readme-timer": {check: func(t *testing.T, e *docEnv, out string) {
		require.Contains(t, out, `"generated_secret":"whsec_`)
		require.Contains(t, out, `"state":"scheduled"`)
		require.Contains(t, out, `"state":"cancelled"`)
	}},
	"readme-task": {check: func(t *testing.T, e *docEnv, out string) {
		require.Contains(t, out, `"outcome":"created"`)
		require.Eventually(t, func() bool {
			var task struct {
				Status string `json:"status"`
			}
			e.get(t, "/v1/tasks/doc-1", &task)
			return task.Status == "success"
		}, time.Minute, 50*time.Millisecond, "the task is pushed to the worker, which reports success")
	}},
	"admission-limits": {check: func(t *testing.T, e *docEnv, out string) {
		var q struct {
			MaxPending int     `json:"max_pending"`
			InsertRate float64 `json:"insert_rate_per_second"`
		}
		require.Equal(t, 200, e.get(t, "/v1/queues/docparse", &q))
		require.Equal(t, 10000, q.MaxPending)
		require.Equal(t, 20.0, q.InsertRate)
	}},
	"outbox-bulk-redrive": {check: func(t *testing.T, e *docEnv, out string) {
		require.Contains(t, out, `"done":`)
	}},
	"tracing-publish": {check: func(t *testing.T, e *docEnv, out string) {
		require.Contains(t, out, `"topic":"orders.created"`)
	}},
}

// Every block with a run marker, in the order of the documents, against a running courier
// dev: the README's examples one after another, then the docs'. Addresses the documents name
// (the gateway on :8080, NATS on :4322, a worker on :9090, callbacks on :9000) are replaced by
// this test's.
func TestDocsCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts courier dev")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("the documented commands use curl: install it in CI")
		}
		t.Skip("the documented commands use curl, which is not installed")
	}
	dev := startDevInstance(t)
	e := &docEnv{dev: dev}
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var push struct {
			Attempt   int    `json:"attempt"`
			ResultURL string `json:"result_url"`
		}
		_ = json.NewDecoder(r.Body).Decode(&push)
		w.WriteHeader(http.StatusAccepted)
		go func() {
			req, _ := http.NewRequest("POST", push.ResultURL, strings.NewReader(fmt.Sprintf(`{"attempt":%d,"status":"success","result":{"words":2}}`, push.Attempt)))
			req.Header.Set("Authorization", "Bearer "+dev.key)
			req.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}))
	defer worker.Close()
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer hooks.Close()
	e.worker, e.hooks = worker.URL, hooks.URL

	// The commands run where `make run` would have left .courier/.
	wd := t.TempDir()
	require.NoError(t, os.Symlink(dev.dir, filepath.Join(wd, ".courier")))
	gwHost := strings.TrimPrefix(dev.gw, "http://")
	addrs := strings.NewReplacer(
		"http://127.0.0.1:8080", dev.gw, "localhost:8080", gwHost,
		"nats://127.0.0.1:4322", dev.nats,
		"http://127.0.0.1:9090", worker.URL, "http://127.0.0.1:9000", hooks.URL,
	)
	n := 0
	for _, b := range docBlocks(t) {
		if b.runBy == "" {
			continue
		}
		run := docRuns[b.runBy]
		if run.before != nil {
			run.before(t, e)
		}
		cmd := exec.Command(bash, "-c", "set -euo pipefail\n"+addrs.Replace(b.body))
		cmd.Dir = wd
		cmd.Env = append(os.Environ(), "KEY="+dev.key, "ADMIN_KEY="+dev.key)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "%s (%s):\n%s\nstdout: %s\nstderr: %s", b, b.runBy, b.body, stdout.String(), stderr.String())
		out := stdout.String()
		require.NotContains(t, out, `"error":{`, "%s (%s) answered an error:\n%s", b, b.runBy, out)
		if run.check != nil {
			run.check(t, e, out)
		}
		n++
	}
	require.Equal(t, len(docRuns), n, "every docRuns row ran")
}
