package client

import (
	"time"

	"github.com/courier-oss/courier/api"
)

// The API's shapes are defined once, in package api; the client names them as its own so a
// caller needs one import. See api for each type's fields.
type (
	// Duration is a length of time as the API writes it ("30s"); zero is left out of requests.
	Duration = api.Duration
	// PositiveDuration is a Duration of a field that has no use for zero (a timeout, an
	// interval); zero is left out of requests, so the default applies.
	PositiveDuration = api.PositiveDuration
	// Retry is a retry policy of a queue or a business type.
	Retry = api.Retry
	// When says when a timer fires: build it with At or After.
	When = api.When
)

// At is a When that fires at t.
func At(t time.Time) When { return api.At(t) }

// After is a When that fires d after the gateway takes the request.
func After(d time.Duration) When { return api.After(d) }
