package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/version"
)

var (
	specOnce   sync.Once
	specDoc    *openapi3.T
	specRouter routers.Router
	specErr    error
)

// openAPISpec loads and validates gateway/openapi.yaml once per test binary.
func openAPISpec(t *testing.T) (*openapi3.T, routers.Router) {
	t.Helper()
	specOnce.Do(func() {
		raw, err := os.ReadFile("openapi.yaml")
		if err != nil {
			specErr = err
			return
		}
		loader := openapi3.NewLoader()
		if specDoc, specErr = loader.LoadFromData(raw); specErr != nil {
			return
		}
		if specErr = specDoc.Validate(context.Background()); specErr != nil {
			specErr = fmt.Errorf("openapi.yaml is not a valid OpenAPI document: %w", specErr)
			return
		}
		specRouter, specErr = gorillamux.NewRouter(specDoc)
	})
	require.NoError(t, specErr)
	return specDoc, specRouter
}

// newServer is httptest.NewServer for the gateway with the OpenAPI document as a referee:
// every request a test makes and every answer the gateway gives is checked against
// openapi.yaml, and a mismatch fails the test. A request the document does not allow (the
// hostile ones tests send on purpose) must be refused with a 4xx; an answer must be a status
// the operation documents, with a body of the documented schema; an error status the operation
// does not list must still be the shared Error shape (components/responses/Error).
func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	doc, router := openAPISpec(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())

		if err := checkExchange(doc, router, r, body, rec); err != nil {
			t.Errorf("openapi.yaml: %s %s → %d: %v\nanswer: %.500s", r.Method, r.URL.RequestURI(), rec.Code, err, rec.Body.String())
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// errNoBearer marks a request without the bearer credentials the document asks for.
var errNoBearer = errors.New("no bearer token")

func checkExchange(doc *openapi3.T, router routers.Router, r *http.Request, body []byte, rec *httptest.ResponseRecorder) error {
	ctx := context.Background()
	req := r.Clone(ctx)
	req.Body = io.NopCloser(bytes.NewReader(body))
	if len(body) > 0 && req.Header.Get("Content-Type") == "" {
		// The gateway reads a body sent without a Content-Type as JSON (gateway/bind.go).
		req.Header.Set("Content-Type", "application/json")
	}
	route, params, err := router.FindRoute(req)
	if err != nil {
		if rec.Code == http.StatusNotFound || rec.Code == http.StatusMethodNotAllowed {
			return checkErrorShape(doc, rec)
		}
		return fmt.Errorf("answered but not documented: %w", err)
	}
	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{
			AuthenticationFunc: func(_ context.Context, ai *openapi3filter.AuthenticationInput) error {
				if !strings.HasPrefix(ai.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ") {
					return errNoBearer
				}
				return nil
			},
		},
	}
	if reqErr := openapi3filter.ValidateRequest(ctx, in); reqErr != nil && rec.Code < 400 {
		return fmt.Errorf("the request does not match the document, yet it was accepted: %w", reqErr)
	}
	resps := route.Operation.Responses
	if resps.Status(rec.Code) == nil && resps.Default() == nil {
		if rec.Code < 400 {
			return fmt.Errorf("status %d is not documented for %s %s", rec.Code, route.Method, route.Path)
		}
		return checkErrorShape(doc, rec)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	out.SetBodyBytes(rec.Body.Bytes())
	return openapi3filter.ValidateResponse(ctx, out)
}

// checkErrorShape checks an error answer against the document's shared Error response.
func checkErrorShape(doc *openapi3.T, rec *httptest.ResponseRecorder) error {
	if rec.Code < 400 {
		return fmt.Errorf("status %d where an error was expected", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("error answered as %q, not JSON", ct)
	}
	var v any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		return fmt.Errorf("error body is not JSON: %w", err)
	}
	schema := doc.Components.Responses["Error"].Value.Content.Get("application/json").Schema.Value
	return schema.VisitJSON(v)
}

// The document is valid OpenAPI 3 (kin-openapi's validation, with examples checked).
func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	doc, _ := openAPISpec(t)
	require.NoError(t, doc.Validate(t.Context(), openapi3.EnableExamplesValidation()))
}

// Every route the router serves, with every optional endpoint group enabled, is an operation
// of the document, and every operation of the document is served.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	t.Parallel()
	doc, _ := openAPISpec(t)
	e := gateway.New(gateway.Config{}, gateway.Deps{Tasks: newCannedTasks(), Timers: stubTimers{}, Schedules: stubSchedules{},
		BizTypes: stubBizTypes{}, Pauses: stubPauses{}, Gatherer: prometheus.NewRegistry()})
	param := regexp.MustCompile(`:([a-z_]+)`)
	var served []string
	for _, r := range e.Routes() {
		if !slices.Contains(httpMethods, strings.ToLower(r.Method)) || r.Path == "/*" || strings.HasSuffix(r.Path, "/*") {
			continue
		}
		if r.Path == "/console" || strings.HasPrefix(r.Path, "/console/") {
			continue // the console's pages are HTML for browsers (docs/operations.md), not API operations
		}
		served = append(served, r.Method+" "+param.ReplaceAllString(r.Path, "{$1}"))
	}
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	slices.Sort(served)
	served = slices.Compact(served)
	require.ElementsMatch(t, documented, served, "served routes (right) and documented operations (left) differ")
}

// The pushes courier sends to workers are the document's webhooks (taskPush, taskPushBatch),
// with typed bodies and answers: the JSON of the very types courier sends and reads matches
// them, and a body missing what a worker relies on does not.
func TestOpenAPIDescribesThePushes(t *testing.T) {
	t.Parallel()
	doc, _ := openAPISpec(t)
	deadline := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	push := api.TaskPush{TaskID: "doc-42", TaskVersion: 3, Attempt: 1, Priority: 2, Queue: "docparse", ConcurrencyKey: "tenant-7",
		Payload: json.RawMessage(`{"file":"a.pdf"}`), Deadline: deadline, HeartbeatTimeout: api.PositiveDuration(30 * time.Second),
		ResultURL: "https://courier.example/v1/tasks/doc-42/versions/3/result", HeartbeatURL: "https://courier.example/v1/tasks/doc-42/versions/3/heartbeat",
		DeliveryID: "task/doc-42/3/1", ResultsURL: "https://courier.example/v1/tasks/results"}
	bodyOf := func(name string) *openapi3.Schema {
		t.Helper()
		item := doc.Webhooks[name]
		require.NotNil(t, item, "webhook %s", name)
		require.NotNil(t, item.Post, "webhook %s is a POST", name)
		return item.Post.RequestBody.Value.Content.Get("application/json").Schema.Value
	}
	answerOf := func(name string) *openapi3.Schema {
		t.Helper()
		r := doc.Webhooks[name].Post.Responses.Value("2XX")
		require.NotNil(t, r, "webhook %s documents its 2xx", name)
		return r.Value.Content.Get("application/json").Schema.Value
	}
	visit := func(s *openapi3.Schema, v any) error {
		raw, err := json.Marshal(v)
		require.NoError(t, err)
		var doc any
		require.NoError(t, json.Unmarshal(raw, &doc))
		return s.VisitJSON(doc)
	}
	require.NoError(t, visit(bodyOf("taskPush"), push))
	require.NoError(t, visit(answerOf("taskPush"), api.PushAnswer{TaskID: "doc-42", TaskVersion: 3, Attempt: 1, Accepted: true}))
	batch := api.TaskPushBatch{Tasks: []api.TaskPush{push, push}, ResultsURL: push.ResultsURL}
	require.NoError(t, visit(bodyOf("taskPushBatch"), batch))
	require.NoError(t, visit(answerOf("taskPushBatch"), api.TaskPushBatchAnswer{Refused: []api.TaskRefusal{
		{TaskID: "doc-42", TaskVersion: 3, Attempt: 1, StatusCode: 429, Message: "busy"}}}))
	require.NoError(t, visit(answerOf("taskPushBatch"), api.TaskPushBatchAnswer{}), "no refusal")

	require.Error(t, visit(bodyOf("taskPushBatch"), api.TaskPushBatch{ResultsURL: push.ResultsURL}), "a batch carries tasks")
	var m map[string]any
	raw, err := json.Marshal(push)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &m))
	delete(m, "deadline")
	require.Error(t, bodyOf("taskPush").VisitJSON(m), "a push names its deadline")
	for _, name := range []string{"taskPush", "taskPushBatch"} {
		var headers []string
		for _, p := range doc.Webhooks[name].Post.Parameters {
			if p.Value.In == "header" {
				headers = append(headers, p.Value.Name)
			}
		}
		require.Subset(t, headers, []string{"webhook-id", "webhook-timestamp", "webhook-signature"}, "%s is signed with Standard Webhooks", name)
	}
}

// stubPauses stands for the pause service where only the routes matter.
type stubPauses struct{ gateway.PauseService }

// The served OpenAPI document states this build's version (the module version Go stamps into
// the binary), not a number written by hand.
func TestOpenAPIStatesTheBuildsVersion(t *testing.T) {
	f := setup(t)
	resp, _ := f.do(t, "GET", "/openapi.yaml", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	require.NoError(t, err)
	require.Equal(t, version.Get().OpenAPI(), doc.Info.Version)

	// A tagged build states its tag: the placeholder in the source is where the version goes.
	tagged, err := openapi3.NewLoader().LoadFromData(gateway.WithVersion(gateway.OpenAPISource, "1.2.3"))
	require.NoError(t, err)
	require.Equal(t, "1.2.3", tagged.Info.Version)
}
