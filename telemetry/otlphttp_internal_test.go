package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/internal/testkit/otlptest"
	"go.opentelemetry.io/otel"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// env is a getenv over a map.
func env(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }

// TestOTLPConfig: the exporter's variables as the specification has them (the traces' own
// over the general ones), and a value it cannot use refused at start, naming the variable.
func TestOTLPConfig(t *testing.T) {
	for _, c := range []struct {
		name    string
		vars    map[string]string
		url     string
		headers map[string]string
		timeout time.Duration
		gzip    bool
		err     string // a part of the error; "" for none
	}{
		{name: "default", url: "http://localhost:4318/v1/traces", timeout: 10 * time.Second},
		{name: "general endpoint gets the path", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://otel.example:4318/"},
			url: "https://otel.example:4318/v1/traces", timeout: 10 * time.Second},
		{name: "general endpoint with a prefix", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://gw/otlp"},
			url: "http://gw/otlp/v1/traces", timeout: 10 * time.Second},
		{name: "traces endpoint as it is", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:9/in"},
			url: "http://b:9/in", timeout: 10 * time.Second},
		{name: "headers, timeout, gzip", vars: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%20b%3D, x-tenant = t1 ", "OTEL_EXPORTER_OTLP_TIMEOUT": "2500", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"},
			url: "http://localhost:4318/v1/traces", headers: map[string]string{"api-key": "a b=", "x-tenant": "t1"}, timeout: 2500 * time.Millisecond, gzip: true},
		{name: "the traces' own win", vars: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=1", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "b=2",
			"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "none", "OTEL_EXPORTER_OTLP_TIMEOUT": "1", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "3000"},
			url: "http://localhost:4318/v1/traces", headers: map[string]string{"b": "2"}, timeout: 3 * time.Second},
		{name: "endpoint without a scheme", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, err: `OTEL_EXPORTER_OTLP_ENDPOINT="collector:4318" is not an http:// or https:// URL`},
		{name: "traces endpoint not http", vars: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "grpc://c:4317"}, err: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="grpc://c:4317"`},
		{name: "header without a value", vars: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=1,broken"}, err: `OTEL_EXPORTER_OTLP_HEADERS: "broken" is not key=value`},
		{name: "header badly escaped", vars: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "a=%zz"}, err: "OTEL_EXPORTER_OTLP_TRACES_HEADERS: the value of a"},
		{name: "timeout not a number", vars: map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "10s"}, err: `OTEL_EXPORTER_OTLP_TIMEOUT="10s" is not a positive number of milliseconds`},
		{name: "unknown compression", vars: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "zstd"}, err: `OTEL_EXPORTER_OTLP_TRACES_COMPRESSION="zstd"`},
		{name: "certificate missing", vars: map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"}, err: "OTEL_EXPORTER_OTLP_CERTIFICATE: open /nonexistent/ca.pem"},
		{name: "client key without its certificate", vars: map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_KEY": "/k.pem"}, err: "needs both OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := readOTLPConfig(env(c.vars))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.url != c.url || cfg.timeout != c.timeout || cfg.gzip != c.gzip || !mapsEqual(cfg.headers, c.headers) || cfg.tls != nil {
				t.Errorf("config %+v, want url %s, headers %v, timeout %v, gzip %v", cfg, c.url, c.headers, c.timeout, c.gzip)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// stepClock is a clock whose Sleep returns at once, moving time on and recording the wait.
type stepClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *stepClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return ctx.Err()
}
func (c *stepClock) WithDeadline(ctx context.Context, _ time.Time) (context.Context, context.CancelFunc) {
	return ctx, func() {}
}

// receiver is an OTLP/HTTP endpoint on 127.0.0.1 answering each post with the next of its
// replies (the last one repeated), decoding what it got with OpenTelemetry's own types (an
// ExportTraceServiceRequest is TracesData on the wire).
type receiver struct {
	mu       sync.Mutex
	replies  []func(http.ResponseWriter)
	requests []*http.Request
	got      []*tracepb.TracesData
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body := io.Reader(req.Body)
	if req.Header.Get("Content-Encoding") == "gzip" {
		z, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = z
	}
	b, _ := io.ReadAll(body)
	var msg tracepb.TracesData
	if err := proto.Unmarshal(b, &msg); err != nil || req.URL.Path != "/v1/traces" || req.Method != http.MethodPost {
		http.Error(w, "not an OTLP trace post", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.requests = append(r.requests, req)
	r.got = append(r.got, &msg)
	reply := r.replies[min(len(r.requests), len(r.replies))-1]
	r.mu.Unlock()
	reply(w)
}

func status(code int, retryAfter string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		http.Error(w, "busy "+http.StatusText(code), code)
	}
}

func ok(w http.ResponseWriter) {}

func batch(name string) []*tracepb.ResourceSpans {
	return []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{Name: name, TraceId: make([]byte, 16), SpanId: []byte{1, 2, 3, 4, 5, 6, 7, 8}}}}}}}
}

// client is a client of the receiver in the environment vars, its waits on a stepClock.
func client(t *testing.T, srv *httptest.Server, vars map[string]string) (*otlpClient, *stepClock) {
	t.Helper()
	all := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL}
	for k, v := range vars {
		all[k] = v
	}
	cfg, err := readOTLPConfig(env(all))
	if err != nil {
		t.Fatal(err)
	}
	c := newOTLPClient(cfg)
	clk := &stepClock{now: time.Unix(1e9, 0)}
	c.clock = clk
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c, clk
}

// TestUploadTraces: a batch reaches the receiver as an ExportTraceServiceRequest, with the
// configured headers and compression; a busy receiver is retried after its Retry-After or the
// backoff, for at most a minute; a refusal is not retried and its body is in the error.
func TestUploadTraces(t *testing.T) {
	for _, c := range []struct {
		name    string
		vars    map[string]string
		replies []func(http.ResponseWriter)
		posts   int
		sleeps  []time.Duration
		err     string
	}{
		{name: "plain", replies: []func(http.ResponseWriter){ok}, posts: 1},
		{name: "gzip and headers", vars: map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip", "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20tok"},
			replies: []func(http.ResponseWriter){ok}, posts: 1},
		{name: "busy, then taken", replies: []func(http.ResponseWriter){status(503, "7"), status(429, ""), status(502, ""), ok},
			posts: 4, sleeps: []time.Duration{7 * time.Second, 5 * time.Second, 7500 * time.Millisecond}},
		{name: "busy for good", replies: []func(http.ResponseWriter){status(504, "")}, posts: 5,
			sleeps: []time.Duration{5 * time.Second, 7500 * time.Millisecond, 11250 * time.Millisecond, 16875 * time.Millisecond}, err: "504 Gateway Timeout: busy Gateway Timeout"},
		{name: "refused", replies: []func(http.ResponseWriter){status(400, "1")}, posts: 1, err: "400 Bad Request: busy Bad Request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &receiver{replies: c.replies}
			srv := httptest.NewServer(r)
			defer srv.Close()
			cl, clk := client(t, srv, c.vars)
			err := cl.UploadTraces(context.Background(), batch("span-"+c.name))
			if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("err = %v, want %q", err, c.err)
			}
			if len(r.requests) != c.posts || !slices.Equal(clk.sleeps, c.sleeps) {
				t.Fatalf("%d posts after waits %v; want %d after %v", len(r.requests), clk.sleeps, c.posts, c.sleeps)
			}
			for i, got := range r.got {
				if s := got.GetResourceSpans()[0].GetScopeSpans()[0].GetSpans()[0]; s.GetName() != "span-"+c.name {
					t.Errorf("post %d carries %v", i, got)
				}
				h := r.requests[i].Header
				if h.Get("Content-Type") != "application/x-protobuf" || (h.Get("Content-Encoding") == "gzip") != (c.vars["OTEL_EXPORTER_OTLP_COMPRESSION"] == "gzip") {
					t.Errorf("post %d headers %v", i, h)
				}
				if c.vars["OTEL_EXPORTER_OTLP_HEADERS"] != "" && h.Get("Authorization") != "Bearer tok" {
					t.Errorf("post %d lacks the configured header: %v", i, h)
				}
			}
		})
	}
}

// TestUploadStopped: Stop ends a batch waiting on a receiver that does not answer.
func TestUploadStopped(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	cl, _ := client(t, srv, nil)
	done := make(chan error, 1)
	go func() { done <- cl.UploadTraces(context.Background(), batch("stuck")) }()
	<-arrived
	if err := cl.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the upload cancelled", err)
	}
}

// TestUploadTLS: an https receiver is trusted through OTEL_EXPORTER_OTLP_CERTIFICATE only,
// and the client certificate and key are presented to it.
func TestUploadTLS(t *testing.T) {
	var mu sync.Mutex
	var peers int
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		peers = len(r.TLS.PeerCertificates)
		mu.Unlock()
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	cert := srv.TLS.Certificates[0]
	ca := writePEM(t, dir, "ca.pem", "CERTIFICATE", cert.Certificate[0])
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	key := writePEM(t, dir, "key.pem", "PRIVATE KEY", keyDER)

	untrusted, _ := client(t, srv, nil)
	if err := untrusted.UploadTraces(context.Background(), batch("x")); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a receiver of an unknown authority was posted to: %v", err)
	}
	trusted, _ := client(t, srv, map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": ca,
		"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE": ca, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": key})
	if err := trusted.UploadTraces(context.Background(), batch("x")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if peers != 1 {
		t.Errorf("the receiver saw %d client certificates, want 1", peers)
	}
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPartialSuccess: spans the receiver took the batch but rejected some of go to
// OpenTelemetry's error handler, as otlptracehttp reports them.
func TestPartialSuccess(t *testing.T) {
	reply := otlptest.ExportResponse(2, "too old")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(reply)
	}))
	defer srv.Close()
	handled := make(chan error, 1)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { handled <- err }))
	defer otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	cl, _ := client(t, srv, nil)
	if err := cl.UploadTraces(context.Background(), batch("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-handled:
		if !strings.Contains(err.Error(), "rejected 2 spans: too old") {
			t.Errorf("handled %v", err)
		}
	default:
		t.Fatal("the partial success was not reported")
	}
}

// FuzzPartialSuccess: whatever the receiver answers, the reader does not fail, and where
// protobuf reads an ExportTraceServiceResponse it reads the same.
func FuzzPartialSuccess(f *testing.F) {
	for _, b := range [][]byte{otlptest.ExportResponse(0, ""), otlptest.ExportResponse(3, "m"), otlptest.ExportResponse(-1, "")} {
		f.Add(b)
		f.Add(append(bytes.Clone(b), b...))
	}
	f.Add([]byte{0x0a, 0x05, 0x08, 0x01, 0x12, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		rejected, msg, ok := partialSuccess(b)
		wantRejected, wantMsg, err := otlptest.ReadExportResponse(b)
		if err != nil {
			return
		}
		if !ok || rejected != wantRejected || msg != wantMsg {
			t.Fatalf("read %d %q %v; protobuf reads %d %q", rejected, msg, ok, wantRejected, wantMsg)
		}
	})
}
