package mq

import (
	"fmt"
	"net/url"
	"strings"
)

// DefaultClientName is the client name Dial gives the broker (NATS connection name, Kafka
// client id, AMQP connection_name).
const DefaultClientName = "courier"

// Dial returns the publisher for a broker URL, picking the adapter by scheme: nats:// (NATS
// JetStream), kafka:// (Kafka), amqp:// or amqps:// (RabbitMQ). See DialNATS, DialKafka and
// DialRabbitMQ for each URL's options. Only a URL it cannot use is an error: a broker that does
// not answer yet makes Publish and Ping fail until it does (unlike DialNATS, which fails), so
// one broker being down never stops a process that publishes to several.
func Dial(rawURL string) (Publisher, error) {
	return DialNamed(rawURL, DefaultClientName)
}

// DialNamed is Dial with the client name the broker shows for this connection.
func DialNamed(rawURL, clientName string) (Publisher, error) {
	if err := CheckURL(rawURL); err != nil {
		return nil, err
	}
	switch Scheme(rawURL) {
	case "nats":
		return dialNATS(rawURL, clientName, true)
	case "kafka":
		return DialKafka(rawURL, clientName)
	case "amqp", "amqps":
		return DialRabbitMQ(rawURL, clientName)
	}
	return nil, unsupported(rawURL)
}

// CheckURL reports whether Dial would accept rawURL (scheme and options), without connecting:
// for validating configuration.
func CheckURL(rawURL string) error {
	var err error
	switch Scheme(rawURL) {
	case "nats":
		for _, one := range strings.Split(rawURL, ",") { // nats.Connect takes a list of servers
			if u, perr := url.Parse(strings.TrimSpace(one)); perr != nil || u.Host == "" {
				return fmt.Errorf("mq: NATS URL %s: want nats://host:port[,nats://host:port...]", RedactURL(rawURL))
			}
		}
	case "kafka":
		_, err = parseKafkaURL(rawURL)
	case "amqp", "amqps":
		_, err = parseRabbitMQURL(rawURL)
	default:
		err = unsupported(rawURL)
	}
	return err
}

// Scheme returns the lower-cased scheme of a broker URL ("" when it has none).
func Scheme(rawURL string) string {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return ""
	}
	return strings.ToLower(scheme)
}

func unsupported(rawURL string) error {
	return fmt.Errorf("mq: broker URL %s: unsupported scheme %q (want nats://, kafka://, amqp:// or amqps://)", RedactURL(rawURL), Scheme(rawURL))
}

// RedactURL returns rawURL with its password (in the user info, or a password= option)
// replaced by "xxxxx", for logs, errors and status pages. A URL it cannot read is replaced
// whole by its scheme.
func RedactURL(rawURL string) string {
	if parts := strings.Split(rawURL, ","); strings.Count(rawURL, "://") > 1 { // nats://a,nats://b
		for i, p := range parts {
			parts[i] = RedactURL(p)
		}
		return strings.Join(parts, ",")
	}
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return "<broker URL without scheme>"
	}
	// Not url.Parse: a Kafka URL lists several hosts, which it refuses.
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo := authority[:at]
		if user, _, hasPass := strings.Cut(userinfo, ":"); hasPass {
			userinfo = user + ":xxxxx"
		}
		authority = userinfo + "@" + authority[at+1:]
	}
	path, query, hasQuery := strings.Cut(tail, "?")
	if hasQuery {
		query, fragment, hasFragment := strings.Cut(query, "#")
		parts := strings.Split(query, "&")
		for i, p := range parts {
			name, _, _ := strings.Cut(p, "=")
			if n, err := url.QueryUnescape(name); err == nil && strings.EqualFold(n, "password") {
				parts[i] = name + "=xxxxx"
			}
		}
		tail = path + "?" + strings.Join(parts, "&")
		if hasFragment {
			tail += "#" + fragment
		}
	}
	return scheme + "://" + authority + tail
}
