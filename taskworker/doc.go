// Package taskworker is the library a task worker embeds: an http.Handler for a queue's
// push_url that verifies courier's push signature, answers 202 at once and runs a handler
// function per attempt, with a context carrying the task and ending at the attempt's deadline.
// While the handler runs it heartbeats on its own; then it posts the handler's result (or its
// error, or a recovered panic, as a failure) through the client package, retrying until the
// deadline. A batched push (several attempts in one request) is verified the same way, and
// each attempt in it taken or refused on its own in the answer; the results of a queue in the
// batched dispatch mode go in batches through POST /v1/tasks/results. Shutdown drains in-flight
// work. See docs/client.md.
package taskworker
