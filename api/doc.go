// Package api holds the JSON shapes of courier's HTTP API, each defined once: the bodies the
// gateway takes and answers (tasks, queues, outbox records, timers, schedules, business
// types, errors) and the bodies courier sends (the task push a worker receives, the timer
// callback a business receives). The gateway, the Go client, the timer service, the
// activities, the task-worker library and the examples all use these types, so a new field is
// one edit. It does no I/O and imports only the domain package and the standard library.
package api
