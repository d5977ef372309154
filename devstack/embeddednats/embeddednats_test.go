package embeddednats_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-oss/courier/devstack/embeddednats"
)

func TestJetStreamDedupAndPersistence(t *testing.T) {
	storeDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	srv, err := embeddednats.Start(embeddednats.Config{Port: -1, StoreDir: storeDir})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if !strings.HasPrefix(srv.URL(), "nats://127.0.0.1:") {
		t.Fatalf("unexpected URL %q", srv.URL())
	}

	nc, js := connect(t, srv.URL())
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     "ORDERS",
		Subjects: []string{"orders.>"},
		Storage:  jetstream.FileStorage,
	})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	for i := 0; i < 2; i++ {
		ack, err := js.Publish(ctx, "orders.created", []byte("order-1"), jetstream.WithMsgID("order-1"))
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if i == 1 && !ack.Duplicate {
			t.Errorf("second publish with the same Nats-Msg-Id was not flagged as duplicate")
		}
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages, want 1 (dedup)", info.State.Msgs)
	}
	nc.Close()
	srv.Shutdown()
	srv.Shutdown() // idempotent

	srv2, err := embeddednats.Start(embeddednats.Config{Port: -1, StoreDir: storeDir})
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer srv2.Shutdown()
	_, js2 := connect(t, srv2.URL())
	stream2, err := js2.Stream(ctx, "ORDERS")
	if err != nil {
		t.Fatalf("stream after restart: %v", err)
	}
	info2, err := stream2.Info(ctx)
	if err != nil {
		t.Fatalf("stream info after restart: %v", err)
	}
	if info2.State.Msgs != 1 {
		t.Fatalf("after restart stream holds %d messages, want 1", info2.State.Msgs)
	}
	msg, err := stream2.GetMsg(ctx, info2.State.FirstSeq)
	if err != nil {
		t.Fatalf("get msg: %v", err)
	}
	if string(msg.Data) != "order-1" {
		t.Fatalf("message data %q, want %q", msg.Data, "order-1")
	}
}

func TestTempStoreDir(t *testing.T) {
	srv, err := embeddednats.Start(embeddednats.Config{Port: -1})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	nc, js := connect(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TMP", Subjects: []string{"tmp"}}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	nc.Close()
	srv.Shutdown()
}

func TestPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port

	srv, err := embeddednats.Start(embeddednats.Config{Port: port, StoreDir: t.TempDir()})
	if err == nil {
		srv.Shutdown()
		t.Fatal("expected an error for a port that is already in use")
	}
	want := "nats: port 127.0.0.1:" + strconv.Itoa(port) + " is already in use (set --nats-port)"
	if err.Error() != want {
		t.Fatalf("error = %q, want %q", err, want)
	}
}

func connect(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}
