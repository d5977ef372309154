// Package mq is courier's message-queue port: the Publisher interface the relay and deliveries
// publish through, and its adapters (NATS JetStream). Every adapter sets the broker's message id
// so a re-publish after a crash is deduplicated by the broker.
package mq
