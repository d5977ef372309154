package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/courier-oss/courier"
)

// The names a reader copies out of the README and docs/ into their own configuration, queries
// and alerting — environment variables, metrics, search attributes, alert names and API paths
// — exist in the code, and every one the code defines is documented somewhere. The deliberate
// exceptions are listed below, each with its reason.

// undocumented are names the code defines that the docs need not mention.
var undocumented = map[string]string{
	"COURIER_AS_MAIN":                "the test binary's switch to run as courier",
	"COURIER_RECORD_HISTORIES":       "make record-histories sets it (docs/testing.md names the target)",
	"COURIER_BENCH_POSTGRES_URL":     "the bench's --postgres-url flag, shown by courier bench -h",
	"COURIER_BENCH_TEMPORAL_ADDRESS": "the bench's --temporal-address flag, shown by courier bench -h",
}

// notInCode are names the docs mention that the code does not define, on purpose.
var notInCode = map[string]string{
	"COURIER_TASK_CODE_VERSION":   "a removed setting: decisions.md and deployment.md say it is gone",
	"COURIER_OUTBOX_CODE_VERSION": "a removed setting: decisions.md and deployment.md say it is gone",
	"COURIER_RECORD_SCREENSHOTS":  "read by the browser test that re-records docs' screenshots",
	"COURIER_RECORD_TRACES":       "read by the test that re-records docs/tracing.md's traces",
	"COURIER_WORKER_KEY":          "a variable of the example worker's own in docs/client.md",
	"courier_console":             "the console's session cookie, not a metric",
}

// docsTexts is the README and every docs/*.md, by path from the repository's root.
func docsTexts(t *testing.T) map[string]string {
	t.Helper()
	root := filepath.Join("..", "..")
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	out := map[string]string{}
	for _, f := range append([]string{filepath.Join(root, "README.md")}, files...) {
		if strings.HasSuffix(f, "benchmarks-history.md") {
			continue // dated rounds: they name what existed then
		}
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, f)
		out[rel] = string(raw)
	}
	return out
}

// goLiterals returns the string literals of the repository's non-test Go files under dir (from
// the root), each with the file it is in.
func goLiterals(t *testing.T, dir string) map[string][]string {
	t.Helper()
	root := filepath.Join("..", "..")
	out := map[string][]string{}
	top := filepath.Join(root, dir)
	err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != top && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					out[s] = append(out[s], path)
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	return out
}

// mentions finds every match of re in the docs: name → the files that mention it.
func mentions(docs map[string]string, re *regexp.Regexp) map[string][]string {
	out := map[string][]string{}
	for file, text := range docs {
		for _, m := range re.FindAllString(text, -1) {
			if !slices.Contains(out[m], file) {
				out[m] = append(out[m], file)
			}
		}
	}
	return out
}

// compare reports the names the docs mention that the code lacks, and the other way round.
func compare(t *testing.T, what string, inDocs map[string][]string, inCode map[string]bool) {
	t.Helper()
	var missing, undoc []string
	for name, files := range inDocs {
		if !inCode[name] && notInCode[name] == "" {
			sort.Strings(files)
			missing = append(missing, name+" (in "+strings.Join(files, ", ")+")")
		}
	}
	for name := range inCode {
		if _, ok := inDocs[name]; !ok && undocumented[name] == "" {
			undoc = append(undoc, name)
		}
	}
	sort.Strings(missing)
	sort.Strings(undoc)
	require.Empty(t, missing, "%s the docs name that the code does not define", what)
	require.Empty(t, undoc, "%s the code defines that no doc names", what)
}

var (
	envName    = regexp.MustCompile(`\bCOURIER_[A-Z0-9_]*[A-Z0-9]\b`)
	metricName = regexp.MustCompile(`\bcourier_[a-z0-9_]*[a-z0-9]\b`)
	// metricToken is a metric name as docs write it, a family with * included (courier_task*).
	metricToken = regexp.MustCompile(`\bcourier_[a-z0-9_*]*[a-z0-9*]`)
	courierID   = regexp.MustCompile(`\bCourier[A-Z][A-Za-z]+\b`)
	apiPath     = regexp.MustCompile("/v1/[A-Za-z0-9_.{}:%~-]+(/[A-Za-z0-9_.{}:%~-]+)*")
)

func TestDocsNameEnvironmentVariablesThatExist(t *testing.T) {
	inCode := map[string]bool{}
	for lit := range goLiterals(t, ".") {
		for _, m := range envName.FindAllString(lit, -1) {
			inCode[m] = true
		}
	}
	compare(t, "environment variables", mentions(docsTexts(t), envName), inCode)
}

// histogramSeries are the suffixes Prometheus adds to a histogram's name in its series.
var histogramSeries = regexp.MustCompile(`_(bucket|count|sum)$`)

func TestDocsNameMetricsThatExist(t *testing.T) {
	inCode := map[string]bool{}
	for lit := range goLiterals(t, "metrics") {
		if metricName.MatchString(lit) && metricName.FindString(lit) == lit {
			inCode[lit] = true
		}
	}
	require.NotEmpty(t, inCode)
	// courier_… names that are not metrics: tables, columns, indexes and channels of the schema.
	schemaNames := map[string]bool{}
	root := filepath.Join("..", "..")
	require.NoError(t, filepath.WalkDir(filepath.Join(root, "schema"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".sql") {
			return err
		}
		raw, err := os.ReadFile(path)
		for _, m := range metricName.FindAllString(string(raw), -1) {
			schemaNames[m] = true
		}
		return err
	}))
	for lit := range goLiterals(t, "store") {
		for _, m := range metricName.FindAllString(lit, -1) {
			schemaNames[m] = true // the store's statements name the schema's tables and channels
		}
	}
	inDocs := map[string][]string{}
	for name, files := range mentions(docsTexts(t), metricToken) {
		if strings.Contains(name, "*") {
			continue // a family of metrics (courier_outbox_*), not one name
		}
		if base := histogramSeries.ReplaceAllString(name, ""); inCode[base] {
			name = base
		}
		if schemaNames[name] && !inCode[name] {
			continue
		}
		inDocs[name] = append(inDocs[name], files...)
	}
	compare(t, "metrics", inDocs, inCode)
}

func TestDocsNameSearchAttributesAndAlertsThatExist(t *testing.T) {
	inCode := map[string]bool{}
	for name := range courier.SearchAttributes {
		inCode[name] = true
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus", "courier-rules.yml"))
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				inCode[r.Alert] = true
			}
		}
	}
	compare(t, "search attributes and alerts", mentions(docsTexts(t), courierID), inCode)
}

func TestDocsNameAPIPathsThatExist(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "gateway", "openapi.yaml"))
	require.NoError(t, err)
	var doc struct {
		Paths map[string]any `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	templates := map[string]*regexp.Regexp{}
	for p := range doc.Paths {
		if !strings.HasPrefix(p, "/v1/") {
			continue
		}
		pattern := regexp.MustCompile(`\\\{[^}]+\\\}`).ReplaceAllString(regexp.QuoteMeta(p), `[^/]+`)
		templates[p] = regexp.MustCompile("^" + pattern + "$")
	}
	inDocs := map[string][]string{}
	for mention, files := range mentions(docsTexts(t), apiPath) {
		mention = strings.TrimRight(mention, ".:")
		// The template that names it: itself, or the one with the fewest parameters that
		// matches (/v1/tasks/results is that route, not /v1/tasks/{task_id}).
		matched := ""
		for p, re := range templates {
			if p == mention {
				matched = p
				break
			}
			if re.MatchString(mention) && (matched == "" || strings.Count(p, "{") < strings.Count(matched, "{")) {
				matched = p
			}
		}
		if matched == "" {
			matched = mention // reported as not in the code
		}
		inDocs[matched] = append(inDocs[matched], files...)
	}
	inCode := map[string]bool{}
	for p := range templates {
		inCode[p] = true
	}
	compare(t, "API paths", inDocs, inCode)
}
