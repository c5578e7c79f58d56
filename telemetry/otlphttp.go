package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/reins-run/reins/clock"
)

// The OTLP/HTTP trace client is reins's own rather than otlptracehttp's: that exporter imports
// the collector's protobuf package, which brings gRPC and, through golang.org/x/net/trace,
// html/template, whose method calls by name keep every exported method of every type in the
// binary (about 30 MB). otlptrace still turns the SDK's spans into OTLP; this file only posts
// them, as the OTLP specification says an HTTP exporter does.

// Retry bounds of a batch the collector could not take yet (429, 502, 503, 504, or a
// connection that failed), as otlptracehttp has them.
const (
	retryFirst   = 5 * time.Second
	retryMax     = 30 * time.Second
	retryElapsed = time.Minute
	// respLimit caps the reply read: a partial success or an error's body is short.
	respLimit = 64 << 10
)

// otlpConfig is the exporter's configuration, read from the OTEL_EXPORTER_OTLP_* variables.
type otlpConfig struct {
	url     string
	headers map[string]string
	timeout time.Duration
	gzip    bool
	tls     *tls.Config // nil: the system's roots, no client certificate
}

// otlpEnv returns the traces' own variable when set, else the general one.
func otlpEnv(getenv func(string) string, suffix string) (string, string) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_" + suffix, "OTEL_EXPORTER_OTLP_" + suffix} {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return k, v
		}
	}
	return "", ""
}

// readOTLPConfig reads the exporter's variables; a value it cannot use is refused, naming it.
func readOTLPConfig(getenv func(string) string) (otlpConfig, error) {
	cfg := otlpConfig{timeout: 10 * time.Second}
	var err error
	if cfg.url, err = traceURL(getenv); err != nil {
		return cfg, err
	}
	if k, v := otlpEnv(getenv, "HEADERS"); v != "" {
		if cfg.headers, err = parseHeaders(v); err != nil {
			return cfg, fmt.Errorf("telemetry: %s: %w", k, err)
		}
	}
	if k, v := otlpEnv(getenv, "TIMEOUT"); v != "" {
		ms, err := strconv.ParseUint(v, 10, 32)
		if err != nil || ms == 0 {
			return cfg, fmt.Errorf("telemetry: %s=%q is not a positive number of milliseconds", k, v)
		}
		cfg.timeout = time.Duration(ms) * time.Millisecond
	}
	switch k, v := otlpEnv(getenv, "COMPRESSION"); v {
	case "", "none":
	case "gzip":
		cfg.gzip = true
	default:
		return cfg, fmt.Errorf("telemetry: %s=%q: the compressions are gzip and none", k, v)
	}
	cfg.tls, err = tlsConfig(getenv)
	return cfg, err
}

// traceURL is where batches are posted: the traces' endpoint as it is, or the general
// endpoint with /v1/traces added, or localhost:4318's.
func traceURL(getenv func(string) string) (string, error) {
	k, raw := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	if raw == "" {
		k, raw = "OTEL_EXPORTER_OTLP_ENDPOINT", strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
		if raw == "" {
			raw = "http://localhost:4318"
		}
		u, err := url.Parse(raw)
		if err == nil {
			raw = u.JoinPath("v1/traces").String()
		}
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("telemetry: %s=%q is not an http:// or https:// URL", k, raw)
	}
	return u.String(), nil
}

// parseHeaders reads "key=value,key2=value2" with percent-encoded values, as the
// specification writes headers.
func parseHeaders(s string) (map[string]string, error) {
	h := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", strings.TrimSpace(pair))
		}
		val, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("the value of %s: %w", k, err)
		}
		h[k] = val
	}
	return h, nil
}

// tlsConfig reads the certificate to trust and the client's certificate and key (PEM files).
func tlsConfig(getenv func(string) string) (*tls.Config, error) {
	caKey, ca := otlpEnv(getenv, "CERTIFICATE")
	certKey, cert := otlpEnv(getenv, "CLIENT_CERTIFICATE")
	keyKey, key := otlpEnv(getenv, "CLIENT_KEY")
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("telemetry: %s: %w", caKey, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("telemetry: %s=%s holds no PEM certificate", caKey, ca)
		}
	}
	if (cert == "") != (key == "") {
		return nil, fmt.Errorf("telemetry: a client certificate needs both OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY (or their TRACES_ forms)")
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("telemetry: %s=%s with %s=%s: %w", certKey, cert, keyKey, key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// otlpClient posts batches of spans to an OTLP/HTTP receiver; otlptrace's exporter calls it.
type otlpClient struct {
	cfg   otlpConfig
	http  *http.Client
	clock clock.Clock // the waits between retries
	stop  context.Context
	halt  context.CancelFunc
}

func newOTLPClient(cfg otlpConfig) *otlpClient {
	// A copy of the default transport (proxy from the environment, keep-alives), unless a
	// program replaced it with one of another kind.
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true}
	if def, ok := http.DefaultTransport.(*http.Transport); ok {
		tr = def.Clone()
	}
	if cfg.tls != nil {
		tr.TLSClientConfig = cfg.tls
	}
	stop, halt := context.WithCancel(context.Background())
	return &otlpClient{cfg: cfg, http: &http.Client{Transport: tr, Timeout: cfg.timeout}, clock: clock.Real{}, stop: stop, halt: halt}
}

// Start has nothing to connect: each batch is a request of its own.
func (c *otlpClient) Start(ctx context.Context) error { return ctx.Err() }

// Stop ends the request in flight, if any.
func (c *otlpClient) Stop(ctx context.Context) error {
	c.halt()
	c.http.CloseIdleConnections()
	return ctx.Err()
}

// UploadTraces posts one batch, retrying while the receiver says it is busy or cannot be
// reached, for at most a minute and ctx's life.
func (c *otlpClient) UploadTraces(ctx context.Context, spans []*tracepb.ResourceSpans) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.stop, cancel)()
	// TracesData is ExportTraceServiceRequest on the wire: resource_spans, field 1, alone.
	body, err := proto.Marshal(&tracepb.TracesData{ResourceSpans: spans})
	if err != nil {
		return fmt.Errorf("telemetry: encode the spans: %w", err)
	}
	if c.cfg.gzip {
		if body, err = gzipped(body); err != nil {
			return err
		}
	}
	start, wait := c.clock.Now(), retryFirst
	for {
		again, err := c.post(ctx, body)
		if err == nil || again < 0 {
			return err
		}
		if again == 0 {
			again, wait = wait, min(wait*3/2, retryMax)
		}
		if c.clock.Now().Sub(start)+again > retryElapsed {
			return err
		}
		if serr := c.clock.Sleep(ctx, again); serr != nil {
			return fmt.Errorf("%w (gave up waiting to retry: %w)", err, serr)
		}
	}
}

// post sends body once. On failure, again is how long to wait before a retry: 0 for the
// backoff's next wait, the server's Retry-After if it named one, below 0 for none.
func (c *otlpClient) post(ctx context.Context, body []byte) (again time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.url, bytes.NewReader(body))
	if err != nil {
		return -1, fmt.Errorf("telemetry: the OTLP request: %w", err)
	}
	for k, v := range c.cfg.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("User-Agent", "reins")
	if c.cfg.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return -1, fmt.Errorf("telemetry: post spans to %s: %w", c.cfg.url, err)
		}
		return 0, fmt.Errorf("telemetry: post spans to %s: %w", c.cfg.url, err)
	}
	defer resp.Body.Close()
	reply, _ := io.ReadAll(io.LimitReader(resp.Body, respLimit))
	if resp.StatusCode/100 == 2 {
		if resp.Header.Get("Content-Type") == "application/x-protobuf" {
			reportPartial(reply)
		}
		return 0, nil
	}
	err = fmt.Errorf("telemetry: %s answered %s: %s", c.cfg.url, resp.Status, bytes.TrimSpace(reply))
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return retryAfter(resp.Header.Get("Retry-After")), err
	}
	return -1, err
}

// retryAfter reads a Retry-After of seconds; 0 (the backoff's wait) when it names none.
func retryAfter(v string) time.Duration {
	if s, err := strconv.ParseUint(strings.TrimSpace(v), 10, 16); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}

func gzipped(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	z := gzip.NewWriter(&buf)
	if _, err := z.Write(b); err != nil {
		return nil, fmt.Errorf("telemetry: gzip the spans: %w", err)
	}
	if err := z.Close(); err != nil {
		return nil, fmt.Errorf("telemetry: gzip the spans: %w", err)
	}
	return buf.Bytes(), nil
}

// reportPartial hands a partial success the receiver reported to OpenTelemetry's error
// handler, as otlptracehttp does: the batch was posted, some spans of it were not kept.
func reportPartial(reply []byte) {
	if rejected, msg, ok := partialSuccess(reply); ok && (rejected != 0 || msg != "") {
		otel.Handle(fmt.Errorf("telemetry: the OTLP receiver rejected %d spans: %s", rejected, msg))
	}
}

// partialSuccess reads ExportTraceServiceResponse's partial_success (field 1): rejected_spans
// (1) and error_message (2), merged over repeats as protobuf merges them. ok is false when
// reply is not such a message.
func partialSuccess(reply []byte) (rejected int64, msg string, ok bool) {
	for len(reply) > 0 {
		num, typ, n := protowire.ConsumeTag(reply)
		if n < 0 {
			return 0, "", false
		}
		reply = reply[n:]
		if num == 1 && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(reply)
			if m < 0 || !partialFields(v, &rejected, &msg) {
				return 0, "", false
			}
			n = m
		} else if n = protowire.ConsumeFieldValue(num, typ, reply); n < 0 {
			return 0, "", false
		}
		reply = reply[n:]
	}
	return rejected, msg, true
}

// partialFields reads the fields of ExportTracePartialSuccess over what earlier ones said.
func partialFields(b []byte, rejected *int64, msg *string) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			var v uint64
			v, n = protowire.ConsumeVarint(b)
			*rejected = int64(v)
		case num == 2 && typ == protowire.BytesType:
			var v []byte
			v, n = protowire.ConsumeBytes(b)
			*msg = string(v)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}
