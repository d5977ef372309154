package apikey

import (
	"strings"

	"github.com/courier-oss/courier"
)

// Scope is a permission an API key carries.
type Scope string

// The scopes. Admin implies every other scope.
const (
	ScopeProducer Scope = "producer" // insert tasks, timers, outbox records
	ScopeWorker   Scope = "worker"   // report task results and heartbeats
	ScopeAdmin    Scope = "admin"    // configuration, redrive, everything
)

// ParseScopes parses a comma-separated scope list and rejects unknown names.
func ParseScopes(s string) ([]Scope, error) {
	var out []Scope
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		switch Scope(p) {
		case ScopeProducer, ScopeWorker, ScopeAdmin:
			out = append(out, Scope(p))
		default:
			return nil, courier.Errorf(courier.CodeInvalid, "unknown scope %q (want producer, worker or admin)", p)
		}
	}
	if len(out) == 0 {
		return nil, courier.Errorf(courier.CodeInvalid, "at least one scope is required")
	}
	return out, nil
}

// Key is a stored API key; the secret itself is never stored, only its hash.
type Key struct {
	ID     string
	Name   string
	Scopes []Scope
	// Rate, when set, replaces the gateway's default request rate for this key (a zero Rate:
	// unlimited); nil means the default (COURIER_KEY_RATE_LIMIT).
	Rate *courier.Rate
}

// Allows reports whether the key may act with scope s.
func (k Key) Allows(s Scope) bool {
	for _, have := range k.Scopes {
		if have == s || have == ScopeAdmin {
			return true
		}
	}
	return false
}
