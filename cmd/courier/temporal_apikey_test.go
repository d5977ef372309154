package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/courier-oss/courier/devstack"
	"github.com/courier-oss/courier/devstack/embeddednats"
	"github.com/courier-oss/courier/internal/testenv"
)

// rawFrame is one gRPC message, forwarded without decoding.
type rawFrame []byte

// rawCodec passes messages through as bytes, so the proxy forwards every method of every
// service without knowing them.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*rawFrame)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*rawFrame)) = append(rawFrame(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// authProxy is a TLS gRPC server in front of a Temporal frontend, as Temporal Cloud's endpoint
// is: it refuses every call without "authorization: Bearer <key>" and forwards the others.
type authProxy struct {
	addr     string
	certFile string // its self-signed certificate, the CA a client pins
	mu       sync.Mutex
	methods  map[string]int // calls that carried the key, by method
	refused  []string       // calls that did not
}

func startAuthProxy(t *testing.T, backend, key string) *authProxy {
	t.Helper()
	cert, certPEM := selfSignedCert(t)
	p := &authProxy{methods: map[string]int{}, certFile: filepath.Join(t.TempDir(), "ca.pem")}
	require.NoError(t, os.WriteFile(p.certFile, certPEM, 0o600))
	conn, err := grpc.NewClient(backend, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})),
		grpc.ForceServerCodec(rawCodec{}),
		grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
			method, _ := grpc.MethodFromServerStream(ss)
			md, _ := metadata.FromIncomingContext(ss.Context())
			p.mu.Lock()
			if auth := md.Get("authorization"); len(auth) != 1 || auth[0] != "Bearer "+key {
				p.refused = append(p.refused, method)
				p.mu.Unlock()
				return status.Error(codes.Unauthenticated, "missing or wrong API key")
			}
			p.methods[method]++
			p.mu.Unlock()
			return forwardStream(ss, conn, method, md)
		}),
	)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	p.addr = ln.Addr().String()
	return p
}

// forwardStream relays one call, unary or streaming, to the backend and its answer back.
func forwardStream(ss grpc.ServerStream, conn *grpc.ClientConn, method string, md metadata.MD) error {
	md = md.Copy()
	md.Delete("authorization") // the backend needs no key
	ctx := metadata.NewOutgoingContext(ss.Context(), md)
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return err
	}
	go func() {
		for {
			var f rawFrame
			if err := ss.RecvMsg(&f); err != nil {
				_ = cs.CloseSend()
				return
			}
			if err := cs.SendMsg(&f); err != nil {
				return
			}
		}
	}()
	if hdr, err := cs.Header(); err == nil {
		_ = ss.SendHeader(hdr)
	}
	for {
		var f rawFrame
		err := cs.RecvMsg(&f)
		if errors.Is(err, io.EOF) {
			ss.SetTrailer(cs.Trailer())
			return nil
		}
		if err != nil {
			ss.SetTrailer(cs.Trailer())
			return err
		}
		if err := ss.SendMsg(&f); err != nil {
			return err
		}
	}
}

func (p *authProxy) seen() (map[string]int, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := map[string]int{}
	for k, v := range p.methods {
		m[k] = v
	}
	return m, append([]string(nil), p.refused...)
}

// selfSignedCert is a certificate for 127.0.0.1, and its PEM.
func selfSignedCert(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "temporal-cloud-stand-in"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	require.NoError(t, err)
	return cert, certPEM
}

// A worker and a gateway given TEMPORAL_API_KEY reach Temporal through an endpoint that, like
// Temporal Cloud's, speaks only TLS and refuses any call without "authorization: Bearer <key>":
// the worker polls and becomes ready, the gateway answers /readyz, every call they make carries
// the key, and neither logs it, even at debug level.
func TestTemporalAPIKey(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Temporal server")
	}
	ctx := t.Context()
	dsn := testenv.PostgresURL(t)
	tmp, err := devstack.StartTemporal(ctx, devstack.Config{DataDir: t.TempDir(), TemporalPort: -1, DisableUI: true})
	require.NoError(t, err)
	t.Cleanup(tmp.Stop)
	ns, err := embeddednats.Start(embeddednats.Config{Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(ns.Shutdown)
	const key = "tmprl_test.KeyThatMustNeverBeLogged"
	proxy := startAuthProxy(t, tmp.Address(), key)

	env := []string{"DATABASE_URL=" + dsn, "TEMPORAL_ADDRESS=" + proxy.addr, "TEMPORAL_NAMESPACE=" + tmp.Namespace(),
		"TEMPORAL_TLS_CA=" + proxy.certFile, "TEMPORAL_API_KEY=" + key, "NATS_URL=" + ns.URL(), "COURIER_LOG_LEVEL=debug",
		"COURIER_PUBLIC_URL=http://127.0.0.1:1"}
	out, err := courierCmd(t, env, "migrate").CombinedOutput()
	require.NoError(t, err, "%s", out)

	type proc struct {
		cmd  *exec.Cmd
		out  *bytes.Buffer
		done chan error
		url  string
	}
	start := func(role string) proc {
		port := freePort(t)
		cmd := courierCmd(t, append(env, fmt.Sprintf("COURIER_HTTP_ADDR=127.0.0.1:%d", port)), role)
		buf := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = buf, buf
		require.NoError(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		return proc{cmd, buf, done, fmt.Sprintf("http://127.0.0.1:%d", port)}
	}
	procs := map[string]proc{"worker": start("worker"), "gateway": start("gateway")}
	for role, p := range procs {
		require.Eventually(t, func() bool {
			resp, err := http.Get(p.url + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, time.Minute, 200*time.Millisecond, "the %s becomes ready through the API-key endpoint:\n%s", role, p.out)
	}
	methods, refused := proxy.seen()
	require.Empty(t, refused, "every call carries the key")
	for _, m := range []string{"GetSystemInfo", "PollWorkflowTaskQueue", "PollActivityTaskQueue"} {
		require.Positive(t, methods["/temporal.api.workflowservice.v1.WorkflowService/"+m], "%s went through the proxy: %v", m, methods)
	}
	for role, p := range procs {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		select {
		case err := <-p.done:
			require.NoError(t, err, "%s exits 0 on SIGTERM:\n%s", role, p.out)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not stop", role)
		}
		require.NotContains(t, p.out.String(), key, "the %s never logs the key", role)
		require.NotContains(t, p.out.String(), "KeyThatMustNeverBeLogged")
	}
	names := make([]string, 0, len(methods))
	for m := range methods {
		names = append(names, filepath.Base(m))
	}
	sort.Strings(names)
	t.Logf("%d methods called with the key: %v", len(names), names)
}

// An API key turns TLS on (Temporal Cloud refuses plaintext, and a key must never cross the
// network in the clear), a key with spaces inside is refused without being quoted, and the
// key prints as [redacted] however the configuration is printed.
func TestTemporalAPIKeyConfig(t *testing.T) {
	tc := TemporalConfig{Address: "ns.acct.tmprl.cloud:7233", APIKey: "secret-key"}
	tlsCfg, err := tc.tlsConfig()
	require.NoError(t, err)
	require.NotNil(t, tlsCfg, "an API key turns TLS on")
	for _, s := range []string{fmt.Sprintf("%v", tc), fmt.Sprintf("%+v", tc), fmt.Sprintf("%#v", tc), fmt.Sprint(tc.APIKey)} {
		require.NotContains(t, s, "secret-key")
	}
	require.Empty(t, TemporalConfig{}.APIKey.String())

	t.Setenv("TEMPORAL_API_KEY", "  two words  ")
	var cfg Config
	cfg.bind(flag.NewFlagSet("worker", flag.ContinueOnError), "127.0.0.1:0")
	cfg.DatabaseURL = "sqlite:x.db"
	err = cfg.Validate(true)
	require.ErrorContains(t, err, "TEMPORAL_API_KEY")
	require.NotContains(t, err.Error(), "two words")

	t.Setenv("TEMPORAL_API_KEY", " key-from-a-file\n")
	cfg = Config{}
	cfg.bind(flag.NewFlagSet("worker", flag.ContinueOnError), "127.0.0.1:0")
	require.Equal(t, secretString("key-from-a-file"), cfg.Temporal.APIKey, "surrounding whitespace (a file's newline) is trimmed")
}
