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

// jsonSchema2020 validates bodies by the document's own dialect (OpenAPI 3.1 is JSON Schema
// 2020-12): a schema without a type is any JSON value, null included.
var jsonSchema2020 = []openapi3.SchemaValidationOption{openapi3.EnableJSONSchema2020()}

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
			SchemaValidationOptions: jsonSchema2020,
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
		Options: &openapi3filter.Options{IncludeResponseStatus: true, SchemaValidationOptions: jsonSchema2020},
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
	return schema.VisitJSON(v, jsonSchema2020...)
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

// noDefaults fails on a default in a request body's schema: generators (openapi-typescript)
// read a property with a default as always present, so a caller would have to send it. A
// request field's default is written in its description.
func noDefaults(t *testing.T, where string, s *openapi3.Schema, seen map[*openapi3.Schema]bool) {
	t.Helper()
	if s == nil || seen[s] {
		return
	}
	seen[s] = true
	require.Nil(t, s.Default, "%s: a default in a request body (write it in the description)", where)
	for name, p := range s.Properties {
		noDefaults(t, where+"."+name, p.Value, seen)
	}
	if s.Items != nil {
		noDefaults(t, where+"[]", s.Items.Value, seen)
	}
}

// The document is typed enough for generators (docs/api.md, "The OpenAPI document"): a licence;
// every operation has a unique operationId and at least one 4xx answer; every answer but a 204
// has a body schema, and every JSON body, sent or answered, is a named schema
// (components/schemas), so a generated client gets a type per body; every PUT and PATCH, and a
// schedule's pause and unpause, declare what they read; and arbitrary JSON (a payload, a
// result, heartbeat details) is any JSON value, its object an open one (additionalProperties),
// never an object that generators read as empty; request bodies carry no defaults
// (noDefaults).
func TestOpenAPIIsTyped(t *testing.T) {
	t.Parallel()
	doc, _ := openAPISpec(t)
	require.NotNil(t, doc.Info.License, "info.license")
	require.Equal(t, "MIT", doc.Info.License.Name)
	require.Equal(t, "MIT", doc.Info.License.Identifier, "info.license.identifier (SPDX)")

	named := func(where string, ref *openapi3.SchemaRef) {
		require.NotNil(t, ref, "%s: no schema", where)
		require.True(t, strings.HasPrefix(ref.Ref, "#/components/schemas/"), "%s: the body's schema is not a named one (components/schemas)", where)
	}
	ids := map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			require.NotEmpty(t, op.OperationID, "%s has no operationId", where)
			require.NotContains(t, ids, op.OperationID, "%s: operationId %s is also %s's", where, op.OperationID, ids[op.OperationID])
			ids[op.OperationID] = where
			has4xx := false
			for code, resp := range op.Responses.Map() {
				has4xx = has4xx || (len(code) == 3 && code[0] == '4')
				if code == "204" {
					require.Empty(t, resp.Value.Content, "%s %s: a 204 has no body", where, code)
					continue
				}
				require.NotEmpty(t, resp.Value.Content, "%s %s has no body schema", where, code)
				for mt, media := range resp.Value.Content {
					require.NotNil(t, media.Schema, "%s %s %s has no schema", where, code, mt)
					if mt == "application/json" {
						named(where+" "+code, media.Schema)
					}
				}
			}
			require.True(t, has4xx, "%s has no 4xx answer", where)
			if rb := op.RequestBody; rb != nil {
				body := rb.Value.Content.Get("application/json").Schema
				named(where+" request", body)
				noDefaults(t, where+" request", body.Value, map[*openapi3.Schema]bool{})
			}
			if method == http.MethodPut || method == http.MethodPatch || op.OperationID == "pauseSchedule" || op.OperationID == "unpauseSchedule" {
				require.NotNil(t, op.RequestBody, "%s reads a body the document does not declare", where)
			}
		}
	}

	// The webhooks (the pushes to workers) are operations too: their ids are unique among all.
	for name, item := range doc.Webhooks {
		for method, op := range item.Operations() {
			where := "webhook " + name + " " + method
			require.NotEmpty(t, op.OperationID, "%s has no operationId", where)
			require.NotContains(t, ids, op.OperationID, "%s: operationId %s is also %s's", where, op.OperationID, ids[op.OperationID])
			ids[op.OperationID] = where
		}
	}

	anyJSON := map[string]bool{"payload": true, "result": true, "Heartbeat.details": true}
	var walk func(where string, s *openapi3.Schema, seen map[*openapi3.Schema]bool)
	walk = func(where string, s *openapi3.Schema, seen map[*openapi3.Schema]bool) {
		if s == nil || seen[s] {
			return
		}
		seen[s] = true
		if s.Type != nil && s.Type.Includes("object") && len(s.Properties) == 0 && len(s.AllOf) == 0 {
			ap := s.AdditionalProperties
			require.True(t, ap.Schema != nil || (ap.Has != nil && *ap.Has),
				"%s: an object without properties must allow additionalProperties, or generators type it as an empty object", where)
		}
		for name, p := range s.Properties {
			if anyJSON[name] || anyJSON[where+"."+name] {
				for _, typ := range []string{"object", "array", "string", "number", "boolean", "null"} {
					require.True(t, p.Value.Type.Includes(typ), "%s.%s is any JSON value, %s included", where, name, typ)
				}
			}
			walk(where+"."+name, p.Value, seen)
		}
		if s.Items != nil {
			walk(where+"[]", s.Items.Value, seen)
		}
		for _, part := range s.AllOf {
			walk(where, part.Value, seen)
		}
	}
	for name, ref := range doc.Components.Schemas {
		walk(name, ref.Value, map[*openapi3.Schema]bool{})
	}
}
