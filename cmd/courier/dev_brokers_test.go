package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/devstack/embeddednats"
)

// courier dev keeps its embedded NATS as the broker "default" and takes more with --broker and
// --route: a routed topic reaches the extra broker, the rest the embedded one; /readyz reports
// each broker, and stays ready with the extra one down, which the metrics show.
func TestDevTakesExtraBrokers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded Temporal server")
	}
	extra, err := embeddednats.Start(embeddednats.Config{Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(extra.Shutdown)
	stream := func(url, name, subject string) jetstream.Stream {
		nc, err := nats.Connect(url)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		s, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: name, Subjects: []string{subject}})
		require.NoError(t, err)
		return s
	}
	extraStream := stream(extra.URL(), "EXTRA", "extra.>")

	dir := t.TempDir()
	ports := map[string]int{"http": freePort(t), "temporal": freePort(t), "ui": freePort(t), "nats": freePort(t)}
	p := startDev(t, "--data-dir", dir, "--http-port", strconv.Itoa(ports["http"]), "--temporal-port", strconv.Itoa(ports["temporal"]),
		"--ui-port", strconv.Itoa(ports["ui"]), "--nats-port", strconv.Itoa(ports["nats"]), "--shutdown-timeout", "5s",
		"--broker", "extra="+extra.URL(), "--route", "extra.>=extra", "--broker-check-interval", "200ms")
	gw := fmt.Sprintf("http://127.0.0.1:%d", ports["http"])
	type readiness struct {
		Ready  bool              `json:"ready"`
		Checks map[string]string `json:"checks"`
	}
	var ready readiness
	p.waitAnswers(t, gw+"/readyz")
	require.Equal(t, 200, httpJSON(t, "GET", gw+"/readyz", "", nil, &ready))
	require.Equal(t, "ok", ready.Checks["mq:default"])
	require.Equal(t, "ok", ready.Checks["mq:extra"])
	require.Eventually(t, func() bool { return strings.Contains(p.out.String(), "API key") }, 30*time.Second, 50*time.Millisecond)
	require.Contains(t, p.out.String(), "broker       extra = "+extra.URL())
	require.Contains(t, p.out.String(), "routes       extra.>=extra")
	keyB, err := os.ReadFile(filepath.Join(dir, "dev-api-key"))
	require.NoError(t, err)
	key := strings.TrimSpace(string(keyB))

	orders := stream(fmt.Sprintf("nats://127.0.0.1:%d", ports["nats"]), "ORDERS", "orders.>")
	for _, topic := range []string{"extra.created", "orders.created"} {
		require.Equal(t, 201, httpJSON(t, "POST", gw+"/v1/outbox", key, map[string]any{"topic": topic, "payload": 1}, nil))
	}
	msgs := func(s jetstream.Stream) uint64 {
		info, err := s.Info(t.Context())
		require.NoError(t, err)
		return info.State.Msgs
	}
	require.Eventually(t, func() bool { return msgs(extraStream) == 1 && msgs(orders) == 1 }, time.Minute, 50*time.Millisecond,
		"the routed topic reaches the extra broker, the other the embedded NATS")

	extra.Shutdown()
	require.Eventually(t, func() bool {
		var r readiness
		code := httpJSON(t, "GET", gw+"/readyz", "", nil, &r)
		return code == 200 && r.Ready && r.Checks["mq:extra"] == "down" && r.Checks["mq:default"] == "ok"
	}, time.Minute, 100*time.Millisecond, "a down broker is reported; the gateway stays ready")
	require.Eventually(t, func() bool {
		resp, err := http.Get(gw + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `courier_broker_up{broker="extra"} 0`) &&
			strings.Contains(string(b), `courier_broker_up{broker="default"} 1`) &&
			strings.Contains(string(b), `courier_broker_published_total{broker="extra"} 1`)
	}, time.Minute, 100*time.Millisecond, "the metrics say which broker is down")
}
