// Package brokers dials a broker by URL scheme (nats://, kafka://, amqp://, amqps://) with the
// matching mq adapter, and checks broker URLs without connecting. It is the one package that
// links every adapter, for the commands and tools that let the operator pick the broker
// (cmd/courier, bench, examples); code that only publishes takes an mq.Publisher.
package brokers
