package courier_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
)

func TestCheckTopic(t *testing.T) {
	for _, topic := range []string{"orders", "orders.created", "a.b-c.d_e", "A1.B2", strings.Repeat("a", courier.MaxTopicBytes), "_inbox.x", "x._INBOX"} {
		require.NoError(t, courier.CheckTopic("topic", topic), topic)
	}
	for name, topic := range map[string]string{
		"empty":                 "",
		"JetStream purge":       "$JS.API.STREAM.PURGE.ORDERS",
		"JetStream delete":      "$JS.API.STREAM.DELETE.ORDERS",
		"key-value":             "$KV.bucket.key",
		"object store":          "$O.bucket",
		"system":                "$SYS.REQ.SERVER.PING",
		"dollar inside":         "orders.$x",
		"inbox":                 "_INBOX.abc",
		"bare inbox":            "_INBOX",
		"wildcard token":        "orders.*",
		"full wildcard":         "orders.>",
		"space":                 "orders created",
		"leading dot":           ".orders",
		"trailing dot":          "orders.",
		"double dot":            "orders..created",
		"NUL":                   "orders\x00",
		"newline":               "orders\r\nPUB x",
		"non-ASCII":             "заказы",
		"too long":              strings.Repeat("a", courier.MaxTopicBytes+1),
		"slash":                 "orders/created",
		"percent":               "orders%2Ecreated",
		"fullwidth dollar sign": "＄JS.API",
	} {
		t.Run(name, func(t *testing.T) {
			err := courier.CheckTopic("topic", topic)
			require.Error(t, err)
			require.Equal(t, courier.CodeInvalid, courier.ErrorCode(err))
		})
	}
}

func TestCheckHeaders(t *testing.T) {
	require.NoError(t, courier.CheckHeaders("headers", nil))
	require.NoError(t, courier.CheckHeaders("headers", map[string]string{"Trace-Id": "abc", "x-tenant": "t-1", "Empty": "", "Note": "заказ ✓"}))
	many := map[string]string{}
	for i := 0; i <= courier.MaxHeaders; i++ {
		many[fmt.Sprintf("H%d", i)] = "v"
	}
	for name, h := range map[string]map[string]string{
		"msg id":              {"Nats-Msg-Id": "1"},
		"rollup":              {"Nats-Rollup": "all"},
		"expected stream":     {"Nats-Expected-Stream": "X"},
		"expected last seq":   {"nats-expected-last-sequence": "0"},
		"ttl":                 {"NATS-TTL": "1s"},
		"courier's own":       {"Courier-Message-Id": "1"},
		"empty name":          {"": "v"},
		"space in name":       {"A B": "v"},
		"colon in name":       {"A:B": "v"},
		"non-ASCII name":      {"Ключ": "v"},
		"CRLF in value":       {"A": "x\r\nNats-Rollup: all"},
		"NUL in value":        {"A": "x\x00"},
		"invalid UTF-8 value": {"A": "\xff"},
		"same name twice":     {"trace-id": "1", "Trace-Id": "2"},
		"value too long":      {"A": strings.Repeat("v", courier.MaxHeaderValueBytes+1)},
		"name too long":       {strings.Repeat("n", courier.MaxHeaderNameBytes+1): "v"},
		"too many":            many,
	} {
		t.Run(name, func(t *testing.T) {
			err := courier.CheckHeaders("headers", h)
			require.Error(t, err)
			require.Equal(t, courier.CodeInvalid, courier.ErrorCode(err))
		})
	}
}

func TestCheckKey(t *testing.T) {
	require.NoError(t, courier.CheckKey("key", ""))
	require.NoError(t, courier.CheckKey("key", "user-1/заказ"))
	require.Error(t, courier.CheckKey("key", "a\x00"))
	require.Error(t, courier.CheckKey("key", strings.Repeat("k", courier.MaxKeyBytes+1)))
}

// FuzzCheckTopic: a topic the rule accepts can never address broker control subjects, reply
// subjects or wildcards.
func FuzzCheckTopic(f *testing.F) {
	for _, s := range []string{"orders.created", "$JS.API.STREAM.PURGE.X", "_INBOX.a", "a.>", "a..b", "a\x00", "заказ", "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, topic string) {
		if courier.CheckTopic("topic", topic) != nil {
			return
		}
		if topic == "" || len(topic) > courier.MaxTopicBytes || strings.ContainsAny(topic, "$*> \t\r\n\x00") ||
			strings.HasPrefix(topic, "_INBOX.") || topic == "_INBOX" || strings.Contains(topic, "..") ||
			strings.HasPrefix(topic, ".") || strings.HasSuffix(topic, ".") {
			t.Fatalf("accepted %q", topic)
		}
		for _, r := range topic {
			if r > 0x7e {
				t.Fatalf("accepted non-ASCII %q", topic)
			}
		}
	})
}

// FuzzCheckHeaders: accepted headers never carry a reserved name or a line break.
func FuzzCheckHeaders(f *testing.F) {
	for _, s := range [][2]string{{"Trace-Id", "1"}, {"Nats-Rollup", "all"}, {"nats-msg-id", "x"}, {"A", "x\r\nB: y"}, {"", ""}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		if courier.CheckHeaders("headers", map[string]string{name: value}) != nil {
			return
		}
		lower := strings.ToLower(name)
		if strings.HasPrefix(lower, "nats-") || strings.HasPrefix(lower, "courier-") || strings.ContainsAny(name+value, "\r\n\x00") || strings.ContainsAny(name, " :") {
			t.Fatalf("accepted %q: %q", name, value)
		}
	})
}
