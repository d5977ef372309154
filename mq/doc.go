// Package mq is courier's message-queue port: the Publisher interface the relay and deliveries
// publish through, its error values and headers, the Router that spreads topics over several
// brokers, the batch and tracing wrappers, and the broker URL helpers. It links no broker
// client: the adapters live in subpackages (natsmq, kafkamq, rabbitmq) and brokers picks one by
// URL scheme. Every adapter acknowledges only what the broker durably accepted, sets the message
// id so a re-publish after a crash can be deduplicated, and passes the conformance suite in
// mqtest; docs/brokers.md says how each one maps topics, keys, ids and headers.
package mq
