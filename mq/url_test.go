package mq

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// RedactURL hides passwords in the user info and in a password= option, in every URL of a
// NATS server list.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://guest:guest@h:5672/vh":                       "amqp://guest:xxxxx@h:5672/vh",
		"amqp://guest@h":                                     "amqp://guest@h",
		"kafka://u:p@a:1,b:2?sasl=plain":                     "kafka://u:xxxxx@a:1,b:2?sasl=plain",
		"kafka://a:1,b:2?sasl=plain&user=u&password=s3cr%3D": "kafka://a:1,b:2?sasl=plain&user=u&password=xxxxx",
		"nats://u:p@a:4222,nats://v:q@b:4222":                "nats://u:xxxxx@a:4222,nats://v:xxxxx@b:4222",
		"nats://h:4222":                                      "nats://h:4222",
		"h:4222":                                             "<broker URL without scheme>",
	} {
		require.Equal(t, want, RedactURL(in), in)
	}
}
