package gateway

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/outbox"
)

// requestBodies are the body types of every route, as the handlers decode them.
var requestBodies = []func() any{
	func() any { return new(api.PublishRequest) },
	func() any { return new(api.TimerRequest) },
	func() any { return new(api.Reschedule) },
	func() any { return new(api.TaskRequest) },
	func() any { return new(api.TaskResult) },
	func() any { return new(api.Heartbeat) },
	func() any { return new(api.QueueConfig) },
	func() any { return new(api.BizTypeConfig) },
	func() any { return new(api.ScheduleSpec) },
	func() any { return new(api.ScheduleNote) },
	func() any { return new(api.RedriveFilter) },
}

// clientCodes are the codes a body can earn: the decoders never answer anything else.
var clientCodes = map[courier.Code]bool{courier.CodeInvalid: true, courier.CodeValidation: true, courier.CodeTooLarge: true}

func decodeSeeds(f *testing.F) {
	for _, s := range []string{
		`{"topic":"orders.created","key":"k","headers":{"X-Trace":"1"},"payload":{"n":1}}`,
		`{"biz_type":"orders","biz_id":"заказ-✓","delay":"30m","payload":null}`,
		`{"task_id":"t","task_version":9223372036854775807,"priority":1e30,"queue":"q","overrides":{"max_attempts":-1}}`,
		`{"attempt":1,"status":"success","status_code":200,"result":{"a":[1,2]}}`,
		`{"push_url":"http://user:pw@host/","weights":[0,0,0,0,0],"retry":{"backoff":-1}}`,
		`{"delivery":"mq","topic":"$JS.API.STREAM.PURGE.X","secrets":["whsec_x"]}`,
		`{"biz_type":"orders","cron":"* * * * *","time_zone":"Mars/Phobos"}`,
		`{"note":"\u0000"}`, ``, `{`, `[]`, `null`, `"s"`, `{"a":1} {}`, "{\"topic\":\"\xff\"}", `{"topic":{"$gt":""}}`,
	} {
		f.Add([]byte(s))
	}
}

// Any body decodes into every request type or is refused with a client-error code; nothing
// panics.
func FuzzDecodeBodies(f *testing.F) {
	decodeSeeds(f)
	e := echo.New()
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, mk := range requestBodies {
			for _, optional := range []bool{false, true} {
				req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Body = http.MaxBytesReader(nil, req.Body, 1<<16)
				c := e.NewContext(req, httptest.NewRecorder())
				err := decodeBody(c, mk(), optional)
				if err == nil {
					continue
				}
				var ce *courier.Error
				if !errors.As(err, &ce) || !clientCodes[ce.Code] || ce.Message == "" {
					t.Fatalf("body %q into %T: %v is not a client error", body, mk(), err)
				}
			}
		}
	})
}

// A publish body the decoder and the message rule accept never carries a topic or header the
// broker would act on: whatever passes would be published as is.
func FuzzPublishBody(f *testing.F) {
	decodeSeeds(f)
	e := echo.New()
	f.Fuzz(func(t *testing.T, body []byte) {
		c := e.NewContext(httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body)), httptest.NewRecorder())
		var req api.PublishRequest
		if decodeBody(c, &req, false) != nil {
			return
		}
		m := outbox.Message{Topic: req.Topic, Key: req.Key, Payload: req.Payload, Headers: req.Headers}
		err := m.Validate()
		if err == nil {
			if courier.CheckTopic("topic", m.Topic) != nil || courier.CheckHeaders("headers", m.Headers) != nil {
				t.Fatalf("accepted a message the topic/header rule refuses: %+v", m)
			}
			return
		}
		if !clientCodes[courier.ErrorCode(err)] {
			t.Fatalf("refusal %v is not a client error", err)
		}
	})
}

// Any path parameter, however escaped, is read once and then passes the id rule or is refused
// with invalid_argument naming the parameter.
func FuzzPathParams(f *testing.F) {
	for _, s := range []string{"order%3A42", "%00", "..", "%2E%2E", "a%2Fb", "%ZZ", "%E2%9C%93", "%FF", "x"} {
		f.Add(s)
	}
	e := echo.New()
	f.Fuzz(func(t *testing.T, raw string) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.URL.RawPath = "/v1/x/" + raw
		c := e.NewContext(req, httptest.NewRecorder())
		c.SetParamNames("id")
		c.SetParamValues(raw)
		for _, read := range []func(echo.Context, string) (string, error){pathID, pathName} {
			v, err := read(c, "id")
			if err == nil {
				if courier.CheckID("id", v) != nil {
					t.Fatalf("%q read as %q, which breaks the id rule", raw, v)
				}
				continue
			}
			var ce *courier.Error
			if !errors.As(err, &ce) || ce.Code != courier.CodeInvalid || ce.Details["field"] != "id" {
				t.Fatalf("%q: %v is not invalid_argument naming the field", raw, err)
			}
		}
		if _, err := pathInt(c, "id"); err != nil && courier.ErrorCode(err) != courier.CodeInvalid {
			t.Fatalf("%q: integer parameter refused with %v", raw, err)
		}
	})
}
