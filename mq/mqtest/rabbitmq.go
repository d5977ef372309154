package mqtest

import (
	"net/url"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQEnv names the variable holding the URL of the RabbitMQ server tests use;
// DefaultRabbitMQURL is used when it is unset.
const (
	RabbitMQEnv        = "COURIER_TEST_RABBITMQ_URL"
	DefaultRabbitMQURL = "amqp://guest:guest@127.0.0.1:5672/"
)

// RabbitMQURL returns the URL of the RabbitMQ server for tests after checking that it answers.
// If it does not, the test is skipped and says why, except in CI (CI set), where it fails.
func RabbitMQURL(t testing.TB) string {
	t.Helper()
	raw := os.Getenv(RabbitMQEnv)
	if raw == "" {
		raw = DefaultRabbitMQURL
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s: %v", RabbitMQEnv, err)
	}
	conn, err := amqp.DialConfig(raw, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		u.User = nil
		why := "RabbitMQ at " + u.String() + " does not answer: " + err.Error()
		if os.Getenv("CI") != "" {
			t.Fatalf("RabbitMQ is required in CI: %s", why)
		}
		t.Skipf("skipping RabbitMQ test: %s (start one, or set %s, e.g. %s)", why, RabbitMQEnv, DefaultRabbitMQURL)
	}
	_ = conn.Close()
	return raw
}
