package otelsetup

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/courier-oss/courier/tracing"
)

func TestFromEnv(t *testing.T) {
	for _, c := range []struct {
		name    string
		env     map[string]string
		on      bool
		proto   string
		wantErr bool
	}{
		{name: "nothing set", env: nil},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true, proto: ProtocolHTTPProtobuf},
		{name: "traces endpoint, grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true, proto: ProtocolGRPC},
		{name: "traces protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, on: true, proto: ProtocolHTTPProtobuf},
		{name: "sdk disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_SDK_DISABLED": "true"}},
		{name: "exporter none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_TRACES_EXPORTER": "none"}},
		{name: "other exporter", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: true},
		{name: "http/json", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := FromEnv(func(k string) string { return c.env[k] })
			if c.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.on, s.Enabled)
			require.Equal(t, c.proto, s.Protocol)
			if !c.on {
				require.NotEmpty(t, s.Reason)
			}
		})
	}
}

// An OTLP receiver in the test: it records the spans of every export it gets, over HTTP
// (POST /v1/traces, protobuf) or gRPC (the TraceService).
type receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu  sync.Mutex
	got []*coltracepb.ExportTraceServiceRequest
}

func (r *receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var in coltracepb.ExportTraceServiceRequest
	if req.URL.Path != "/v1/traces" || proto.Unmarshal(body, &in) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	_, _ = r.Export(req.Context(), &in)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// spans lists "service.name/span name" of everything received.
func (r *receiver) spans() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, req := range r.got {
		for _, rs := range req.GetResourceSpans() {
			svc := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					svc = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					out = append(out, svc+"/"+s.GetName())
				}
			}
		}
	}
	return out
}

// Start with an OTLP endpoint exports courier's spans there, under service.name courier (or
// OTEL_SERVICE_NAME), over either protocol; the shutdown flushes them.
func TestStartExports(t *testing.T) {
	for _, c := range []struct{ protocol, service string }{{ProtocolHTTPProtobuf, ""}, {ProtocolGRPC, "billing-courier"}} {
		t.Run(c.protocol, func(t *testing.T) {
			rcv := &receiver{}
			var endpoint string
			if c.protocol == ProtocolGRPC {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				srv := grpc.NewServer()
				coltracepb.RegisterTraceServiceServer(srv, rcv)
				go func() { _ = srv.Serve(ln) }()
				t.Cleanup(srv.Stop)
				endpoint = "http://" + ln.Addr().String()
			} else {
				srv := httptest.NewServer(rcv)
				t.Cleanup(srv.Close)
				endpoint = srv.URL
			}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", c.protocol)
			t.Setenv("OTEL_SERVICE_NAME", c.service)
			s, shutdown, err := Start(t.Context())
			require.NoError(t, err)
			require.True(t, s.Enabled)
			_, span := tracing.Start(t.Context(), "probe", trace.SpanKindInternal)
			span.End()
			require.NoError(t, shutdown(t.Context()))
			want := c.service
			if want == "" {
				want = DefaultServiceName
			}
			require.Contains(t, rcv.spans(), want+"/probe")
		})
	}
}
