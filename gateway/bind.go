package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// bindJSON decodes the request body strictly into v: JSON only, no unknown fields, no trailing
// data, within the body limit. Syntax problems are invalid_argument (400); values of the wrong
// type are validation_failed (422).
func bindJSON(c echo.Context, v any) error {
	return decodeBody(c, v, false)
}

// bindOptionalJSON is bindJSON for endpoints whose body may be left out: an empty body (however
// it is sent, with a length or chunked) leaves v as it is; any other body is decoded exactly as
// bindJSON does.
func bindOptionalJSON(c echo.Context, v any) error {
	return decodeBody(c, v, true)
}

func decodeBody(c echo.Context, v any, optional bool) error {
	req := c.Request()
	if ct := req.Header.Get(echo.HeaderContentType); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != echo.MIMEApplicationJSON {
			return &courier.Error{Code: courier.CodeUnsupportedMedia, Message: "send the body as application/json"}
		}
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &courier.Error{Code: courier.CodeTooLarge, Message: "request body is larger than the limit",
				Details: map[string]any{"limit_bytes": mbe.Limit}}
		}
		return courier.Errorf(courier.CodeInvalid, "read body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return nil
		}
		return courier.Errorf(courier.CodeInvalid, "request body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return &courier.Error{Code: courier.CodeInvalid, Message: "malformed JSON: " + se.Error(),
				Details: map[string]any{"offset": se.Offset}}
		case errors.As(err, &te) && te.Field == "":
			return courier.Errorf(courier.CodeInvalid, "the body must be a JSON object")
		case errors.As(err, &te) && api.IsDurationType(te.Type):
			return &courier.Error{Code: courier.CodeValidation,
				Message: te.Field + " must be a " + api.DurationRule(te.Type) + " such as \"10s\"",
				Details: map[string]any{"field": te.Field}}
		case errors.As(err, &te):
			return &courier.Error{Code: courier.CodeValidation,
				Message: "field " + te.Field + " must be " + te.Type.String(),
				Details: map[string]any{"field": te.Field}}
		case renamedField(err) != "":
			old := renamedField(err)
			return &courier.Error{Code: courier.CodeValidation, Message: fmt.Sprintf("unknown field %s: it was renamed %s (CHANGELOG.md)", old, renamedFields[old]),
				Details: map[string]any{"field": old, "use": renamedFields[old]}}
		case errors.Is(err, io.ErrUnexpectedEOF):
			return courier.Errorf(courier.CodeInvalid, "malformed JSON: unexpected end of input")
		default:
			return courier.Errorf(courier.CodeInvalid, "malformed JSON: %v", err)
		}
	}
	if dec.More() {
		return courier.Errorf(courier.CodeInvalid, "malformed JSON: trailing data after the object")
	}
	return nil
}

// renamedFields are the request body fields renamed before 1.0, old name to new (CHANGELOG.md
// lists each rename). No old name is kept as an alias: a body that sends one is 422 naming the
// new name instead of a bare unknown field.
var renamedFields = map[string]string{
	"dead_since": "dead_after", // POST /v1/outbox/redrive
}

// renamedField is the old name an unknown-field decoding error is about, or "".
func renamedField(err error) string {
	const prefix = `json: unknown field "`
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		return ""
	}
	name := strings.TrimSuffix(strings.TrimPrefix(msg, prefix), `"`)
	if _, ok := renamedFields[name]; !ok {
		return ""
	}
	return name
}
