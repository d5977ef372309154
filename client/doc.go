// Package client is courier's Go client: one typed call for every /v1 route of the gateway
// (outbox, business types, timers, schedules, tasks, queues). Refusals come back as *Error,
// which carries courier's error code and matches the sentinels (errors.Is(err, ErrNotFound));
// idempotent calls are retried on 503, 429 and connection errors within a bounded budget.
//
// Its request and answer types are the API's own, defined once in package api (client.Task is
// api.Task). It imports only api, the domain package (courier) and the standard library, so
// producers and task workers can use it without linking courier's server side. See
// docs/client.md.
package client
