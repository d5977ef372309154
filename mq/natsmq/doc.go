// Package natsmq is the NATS JetStream adapter of the mq port: a Publisher whose publishes the
// stream acknowledges, deduplicated by the Nats-Msg-Id header. Streams belong to the operator;
// a subject no stream captures is mq.ErrUnknownTopic.
package natsmq
