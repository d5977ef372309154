// Package courier is the vocabulary every layer shares, and imports nothing of courier's own
// (standard library only), so every package above can depend on it:
//
//   - the records and their statuses: outbox records (outbox.go), tasks and their queues'
//     configuration, versions, filters and attempt outcome kinds (task.go), timers, their states
//     and modes (timerstate.go), business types (biztype.go), pauses (pause.go), and the
//     backlog and outbox summaries the store reads for the console and the metrics (overview.go);
//   - the stable error codes and the error type (errors.go);
//   - the rules on what callers send: ids and names (ids.go), topics, keys and headers
//     (topic.go, topicpattern.go), signing secrets (secrets.go), priority bands and their
//     weights (priority.go), rates (rate.go);
//   - the W3C trace context as it travels between processes (trace.go);
//   - the one table of the workflows courier starts and every name they go by in Temporal:
//     workflow types, ids, task queues and search attributes (kinds.go).
//
// The domain types carry no JSON or bun tags (the trace context aside, which is the same in
// every shape): the store keeps its own row shapes (store/), the HTTP API and what courier sends
// are in api/, the workflows' and activities' payloads in activities/contract.
package courier
