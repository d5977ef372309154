package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"time"
)

// Duration is a length of time as the API writes it: a Go duration string ("30s", "1h30m0s").
// It reads "", "0" and "0s" as zero, and refuses a negative one. In requests a zero Duration is
// left out (the field's default applies), which is how the Go client sends it.
type Duration time.Duration

// String is the Go duration string.
func (d Duration) String() string { return time.Duration(d).String() }

// Std is d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// MarshalJSON writes the Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string. A value that is not one is a
// *json.UnmarshalTypeError, so the decoder names the field it was in.
func (d *Duration) UnmarshalJSON(b []byte) error {
	v, err := parseDuration(b, reflect.TypeFor[Duration](), true)
	*d = Duration(v)
	return err
}

// PositiveDuration is a Duration whose fields have no use for zero: a timeout, an interval,
// a retention. "" means "not given" (the default applies) and reads as zero; an explicit "0s"
// or a negative value is refused, so a typo never silently becomes the default.
type PositiveDuration time.Duration

// String is the Go duration string.
func (d PositiveDuration) String() string { return time.Duration(d).String() }

// Std is d as a time.Duration.
func (d PositiveDuration) Std() time.Duration { return time.Duration(d) }

// MarshalJSON writes the Go duration string.
func (d PositiveDuration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a positive Go duration string, or "" for none.
func (d *PositiveDuration) UnmarshalJSON(b []byte) error {
	v, err := parseDuration(b, reflect.TypeFor[PositiveDuration](), false)
	*d = PositiveDuration(v)
	return err
}

// IsDurationType reports whether t is one of this package's duration types, so a decoder can
// word the refusal of a bad one.
func IsDurationType(t reflect.Type) bool {
	return t == reflect.TypeFor[Duration]() || t == reflect.TypeFor[PositiveDuration]()
}

// DurationRule words what a duration type takes, for a refusal: "positive duration" or
// "non-negative duration".
func DurationRule(t reflect.Type) string {
	if t == reflect.TypeFor[PositiveDuration]() {
		return "positive duration"
	}
	return "non-negative duration"
}

// parseDuration reads a JSON string holding a Go duration. zeroOK says whether an explicit
// zero is a value ("" is always "not given").
func parseDuration(b []byte, typ reflect.Type, zeroOK bool) (time.Duration, error) {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return 0, &json.UnmarshalTypeError{Value: jsonKind(b), Type: typ}
	}
	if s == "" {
		return 0, nil
	}
	if s == "0" && zeroOK {
		return 0, nil
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 || (v == 0 && !zeroOK) {
		return 0, &json.UnmarshalTypeError{Value: "string " + quoteShort(s), Type: typ}
	}
	return v, nil
}

// jsonKind names the kind of a JSON value, as encoding/json's own type errors do.
func jsonKind(b []byte) string {
	switch t := strings.TrimSpace(string(b)); {
	case t == "null":
		return "null"
	case t == "true" || t == "false":
		return "bool"
	case strings.HasPrefix(t, "{"):
		return "object"
	case strings.HasPrefix(t, "["):
		return "array"
	case strings.HasPrefix(t, `"`):
		return "string"
	}
	return "number"
}

func quoteShort(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return `"` + s + `"`
}
