package brokers

import (
	"fmt"

	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/mq/kafkamq"
	"github.com/courier-oss/courier/mq/natsmq"
	"github.com/courier-oss/courier/mq/rabbitmq"
)

// DefaultClientName is the client name Dial gives the broker (NATS connection name, Kafka
// client id, AMQP connection_name).
const DefaultClientName = "courier"

// Dial returns the publisher for a broker URL, picking the adapter by scheme: nats:// (NATS
// JetStream), kafka:// (Kafka), amqp:// or amqps:// (RabbitMQ). See natsmq.Dial, kafkamq.Dial
// and rabbitmq.Dial for each URL's options. Only a URL it cannot use is an error: a broker that
// does not answer yet makes Publish and Ping fail until it does (unlike natsmq.Dial, which
// fails), so one broker being down never stops a process that publishes to several.
func Dial(rawURL string) (mq.Publisher, error) {
	return DialNamed(rawURL, DefaultClientName)
}

// DialNamed is Dial with the client name the broker shows for this connection.
func DialNamed(rawURL, clientName string) (mq.Publisher, error) {
	if err := CheckURL(rawURL); err != nil {
		return nil, err
	}
	switch mq.Scheme(rawURL) {
	case "nats":
		return natsmq.DialLazy(rawURL, clientName)
	case "kafka":
		return kafkamq.Dial(rawURL, clientName)
	case "amqp", "amqps":
		return rabbitmq.Dial(rawURL, clientName)
	}
	return nil, unsupported(rawURL)
}

// CheckURL reports whether Dial would accept rawURL (scheme and options), without connecting:
// for validating configuration.
func CheckURL(rawURL string) error {
	switch mq.Scheme(rawURL) {
	case "nats":
		return natsmq.CheckURL(rawURL)
	case "kafka":
		return kafkamq.CheckURL(rawURL)
	case "amqp", "amqps":
		return rabbitmq.CheckURL(rawURL)
	}
	return unsupported(rawURL)
}

func unsupported(rawURL string) error {
	return fmt.Errorf("mq: broker URL %s: unsupported scheme %q (want nats://, kafka://, amqp:// or amqps://)", mq.RedactURL(rawURL), mq.Scheme(rawURL))
}
