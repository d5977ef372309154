// Package rabbitmq is the RabbitMQ (AMQP 0-9-1) adapter of the mq port: a Publisher with
// publisher confirms and mandatory routing to one exchange, configured by an amqp:// or amqps://
// URL. A message no queue receives is mq.ErrUnknownTopic.
package rabbitmq
