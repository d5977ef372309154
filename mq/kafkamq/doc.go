// Package kafkamq is the Apache Kafka adapter of the mq port (franz-go): an idempotent producer
// with acks=all, configured by a kafka:// URL (brokers, TLS, SASL, auto_create). Topics belong
// to the operator; a topic Kafka does not have is mq.ErrUnknownTopic.
package kafkamq
