// Command docparse is courier's task-worker example: a document-parsing worker that courier
// pushes prioritized tasks to, built on the taskworker library.
//
//	docparse --addr 127.0.0.1:9090 --courier-key WORKER_KEY [--secret whsec_…] [--parse-time 5s]
//
// A producer POSTs a task to courier (/v1/tasks, payload {"name": …, "text": …}); courier
// pushes it to the queue's push_url, POST /push here. The taskworker library checks the
// signature (when the queue has secrets) and the body, answers 202 at once, heartbeats while
// the handler runs and posts its result; docparse's handler (worker.go) counts the pages, words
// and characters of the text after a simulated parse time, or fails a payload that is not a
// document.
//
// Flags fall back to environment variables: DOCPARSE_ADDR, COURIER_URL, COURIER_API_KEY,
// DOCPARSE_SECRET, DOCPARSE_PARSE_TIME, DOCPARSE_DRAIN and DOCPARSE_MAX_CONCURRENT. SIGINT or
// SIGTERM stops it cleanly. See README.md for a walk-through with courier dev.
package main
