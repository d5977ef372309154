// Package mq is courier's message-queue port: the Publisher interface the relay and deliveries
// publish through, and its adapters (NATS JetStream, Kafka, RabbitMQ), picked by URL scheme
// with Dial. Every adapter acknowledges only what the broker durably accepted and sets the
// message id so a re-publish after a crash can be deduplicated; docs/brokers.md says how each
// one maps topics, keys, ids and headers.
package mq
