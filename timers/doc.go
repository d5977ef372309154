// Package timers is the service behind the timer API: it starts, inspects, reschedules,
// cancels and lists timer workflows (timer/<biz_type>/<biz_id>) through the Temporal client.
// Timers live in Temporal only; there is no timer table.
package timers
