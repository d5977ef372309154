package apicheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	// The generated client's one dependency, kept in go.mod by this import.
	_ "github.com/oapi-codegen/runtime"
)

// TestGeneratedGoClientCompiles generates a typed Go client (models and client) from
// gateway/openapi.yaml with oapi-codegen, the tool go.mod pins, and builds and vets it: a schema
// a generator cannot type, or a body without a named type, fails here.
func TestGeneratedGoClientCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a code generator and its output")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	// Inside the module (so the generated code resolves its imports from go.mod), in testdata
	// (so ./... never sees it), removed afterwards.
	dir := filepath.Join(root, "internal", "tools", "apicheck", "testdata", "gen")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Join(root, "internal", "tools", "apicheck", "testdata")) })
	cfg := filepath.Join(dir, "oapi-codegen.yaml")
	out := filepath.Join(dir, "client.gen.go")
	if err := os.WriteFile(cfg, []byte("package: courierapi\ngenerate:\n  models: true\n  client: true\n"+
		// Keep the schemas only the webhooks (courier's pushes to workers) use.
		"output-options:\n  skip-prune: true\noutput: "+out+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	run("tool", "oapi-codegen", "-config", cfg, filepath.Join("gateway", "openapi.yaml"))
	src, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// The operations the README's examples use have typed calls and typed answers.
	for _, want := range []string{
		"func (c *Client) PublishOutbox", "func (c *Client) CreateTimer", "func (c *Client) InsertTask",
		"type OutboxRecord struct", "type Timer struct", "type Task struct", "type JSONValue = json.RawMessage",
		// The pushes to workers (webhooks) and their answers, for a worker written from the document.
		"type TaskPush struct", "type TaskPushBatch struct", "type TaskPushBatchAnswer struct", "func NewTaskPushBatchWebhookRequest",
	} {
		if !strings.Contains(string(src), want) {
			t.Errorf("the generated client has no %q", want)
		}
	}
	run("build", "./internal/tools/apicheck/testdata/gen")
	run("vet", "./internal/tools/apicheck/testdata/gen")
}
