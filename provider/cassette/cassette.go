// Package cassette records real provider exchanges into a file and serves them back, so that
// examples and tests replay real conversations with no network and no API key.
//
// It works at the HTTP level (an http.RoundTripper), below the official SDKs, so one mechanism
// serves every provider and the SDKs' own request building and reply parsing run for real during
// replay. It owns the cassette format and the redaction of secrets; it must not know how any
// provider's protocol looks beyond "JSON request, any response body".
package cassette

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Version is the cassette format version this package writes and reads.
const Version = 1

// Cassette is a recorded conversation with one provider.
type Cassette struct {
	Version  int    `json:"version"`
	Provider string `json:"provider"` // openai | anthropic
	Model    string `json:"model"`
	// BasePath is the path of the base URL the exchanges were recorded against ("/v1" for
	// OpenAI's API), so that replay can rebuild the same request paths on any host.
	BasePath     string        `json:"base_path"`
	Interactions []Interaction `json:"interactions"`
}

// Interaction is one request and its response.
type Interaction struct {
	Request  Request  `json:"request"`
	Response Response `json:"response"`
}

// Request is what matters of a request for matching: method, path and body. Headers are never
// stored, so no API key or token can leak into a cassette.
type Request struct {
	Method string          `json:"method"`
	Path   string          `json:"path"`
	Body   json.RawMessage `json:"body,omitempty"`
}

// Response is a recorded response: status, the few headers that carry meaning, and the body
// (JSON or a server-sent event stream) as text.
type Response struct {
	Status int                 `json:"status"`
	Header map[string][]string `json:"header,omitempty"`
	Body   string              `json:"body"`
}

// keptHeaders are the only response headers a cassette stores.
var keptHeaders = []string{"Content-Type", "Retry-After", "Retry-After-Ms"}

// Load reads a cassette file; errors name the file.
func Load(path string) (*Cassette, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cassette %s: %w", path, err)
	}
	return Parse(path, data)
}

// Parse checks and decodes a cassette; path is only used in errors.
func Parse(path string, data []byte) (*Cassette, error) {
	var c Cassette
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("cassette %s is not a valid cassette: %s", path, decodeProblem(err))
	}
	switch {
	case c.Version != Version:
		return nil, fmt.Errorf("cassette %s: version %d, this reins reads version %d", path, c.Version, Version)
	case c.Provider == "":
		return nil, fmt.Errorf("cassette %s: key provider is missing", path)
	}
	for i, in := range c.Interactions {
		if in.Request.Method == "" || in.Request.Path == "" || in.Response.Status == 0 {
			return nil, fmt.Errorf("cassette %s: interactions[%d] needs request.method, request.path and response.status", path, i)
		}
	}
	return &c, nil
}

// decodeProblem says what is wrong with a file that did not decode, without quoting any of it:
// the file may be anything a workflow named (an error must not become a way to read files).
func decodeProblem(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("not JSON (at byte %d)", syn.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("key %s has a value of the wrong type (want %s)", typ.Field, typ.Type)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "not JSON (it ends too early)"
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return "it has a key that is not a key of cassettes"
	}
	return "not a cassette"
}

// Save writes the cassette atomically (a temporary file renamed over the target).
func (c *Cassette) Save(path string) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".cassette-*")
	if err != nil {
		return fmt.Errorf("cassette %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("cassette %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cassette %s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}

// Recorder is an http.RoundTripper that forwards requests to the real server and records every
// completed exchange into its cassette file, rewriting the file after each one. Streams stay live
// while recording: the response body is copied into the cassette as it is read.
type Recorder struct {
	path    string
	next    http.RoundTripper
	secrets []string

	mu      sync.Mutex
	c       Cassette
	saveErr error
}

// NewRecorder records into path. Every secret (the API key) is replaced by "[REDACTED]" wherever
// it appears in a recorded body. next is the real transport (nil: http.DefaultTransport).
func NewRecorder(path string, c Cassette, next http.RoundTripper, secrets ...string) *Recorder {
	if next == nil {
		next = http.DefaultTransport
	}
	c.Version = Version
	var kept []string
	for _, s := range secrets {
		if s != "" {
			kept = append(kept, s)
		}
	}
	return &Recorder{path: path, next: next, secrets: kept, c: c}
}

// Client returns an HTTP client that records through r.
func (r *Recorder) Client() *http.Client { return &http.Client{Transport: r} }

// RoundTrip forwards the request and arranges for the exchange to be recorded once the response
// body has been read to its end.
func (r *Recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := readBody(req)
	if err != nil {
		return nil, err
	}
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	rec := Request{Method: req.Method, Path: req.URL.Path, Body: json.RawMessage(r.redact(body))}
	if !json.Valid(rec.Body) {
		rec.Body = nil
	}
	resp.Body = &teeBody{ReadCloser: resp.Body, done: func(b []byte) {
		r.add(Interaction{Request: rec, Response: Response{Status: resp.StatusCode, Header: keep(resp.Header), Body: string(r.redact(b))}})
	}}
	return resp, nil
}

func (r *Recorder) add(in Interaction) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.c.Interactions = append(r.c.Interactions, in)
	// A failed write must not break the live call being recorded; Err reports it.
	if err := r.c.Save(r.path); err != nil {
		r.saveErr = err
	}
}

// Err reports the last failure to write the cassette file, if any.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.saveErr
}

func (r *Recorder) redact(b []byte) []byte {
	for _, s := range r.secrets {
		b = bytes.ReplaceAll(b, []byte(s), []byte("[REDACTED]"))
	}
	return b
}

// teeBody copies what is read and hands the whole body over once it has been read to its end.
// A reader that closes it first (an SDK stops reading a stream at its last event, before the
// server's end of the body) has the rest read at Close, up to [drainLimit]: an exchange is
// recorded only whole, so replay never serves a truncated reply as if it were complete.
type teeBody struct {
	io.ReadCloser
	buf  bytes.Buffer
	done func([]byte)
	once sync.Once
}

// drainLimit bounds what Close reads of a body its reader left unfinished.
const drainLimit = 1 << 20

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	t.buf.Write(p[:n])
	if errors.Is(err, io.EOF) {
		t.once.Do(func() { t.done(t.buf.Bytes()) })
	}
	return n, err
}

// Close reads what is left of the body (a cancelled request's read fails at once, and nothing
// is recorded), then closes it.
func (t *teeBody) Close() error {
	_, _ = io.Copy(io.Discard, io.LimitReader(t, drainLimit))
	return t.ReadCloser.Close()
}

func keep(h http.Header) map[string][]string {
	out := map[string][]string{}
	for _, k := range keptHeaders {
		if v := h.Values(k); len(v) > 0 {
			out[k] = v
		}
	}
	return out
}

func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return b, nil
}

// Replayer is an http.RoundTripper that answers from a cassette: a request gets the response of
// the first unused recorded exchange with the same method, path and JSON body (compared with
// object keys in any order). A request that matches only exchanges already used gets the last
// of them again (a retried request); one that matches nothing is a *MissError.
type Replayer struct {
	c    *Cassette
	path string

	mu    sync.Mutex
	used  []bool
	count int
}

// NewReplayer serves c, loaded from path (used in errors).
func NewReplayer(c *Cassette, path string) *Replayer {
	return &Replayer{c: c, path: path, used: make([]bool, len(c.Interactions))}
}

// Client returns an HTTP client that replays through r.
func (r *Replayer) Client() *http.Client { return &http.Client{Transport: r} }

// MissError is a request that is not in the cassette. Retrying cannot help.
type MissError struct {
	Cassette string
	Method   string
	Path     string
	Seq      int // 1-based number of the request in this replay
	Recorded int
	Diff     string // where the request differs from the next unused recorded one
}

func (e *MissError) Error() string {
	msg := fmt.Sprintf("cassette %s has no recorded exchange for request %d (%s %s) among its %d", e.Cassette, e.Seq, e.Method, e.Path, e.Recorded)
	if e.Diff != "" {
		msg += "; " + e.Diff
	}
	return msg
}

// NotRetryable marks the error for provider.TransportError.
func (e *MissError) NotRetryable() {}

// RoundTrip answers req from the cassette.
func (r *Replayer) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := readBody(req)
	if err != nil {
		return nil, err
	}
	want, err := canonical(body)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count++
	match, reuse, firstUnused := -1, -1, -1
	for i, in := range r.c.Interactions {
		if firstUnused < 0 && !r.used[i] {
			firstUnused = i
		}
		if in.Request.Method != req.Method || in.Request.Path != req.URL.Path {
			continue
		}
		got, err := canonical(in.Request.Body)
		if err != nil || got != want {
			continue
		}
		if !r.used[i] {
			match = i
			break
		}
		reuse = i
	}
	if match < 0 {
		match = reuse
	}
	if match < 0 {
		miss := &MissError{Cassette: r.path, Method: req.Method, Path: req.URL.Path, Seq: r.count, Recorded: len(r.c.Interactions)}
		if firstUnused >= 0 {
			miss.Diff = "the next unused recorded request differs " + firstDifference(r.c.Interactions[firstUnused].Request, req.Method, req.URL.Path, body)
		}
		return nil, miss
	}
	r.used[match] = true
	rec := r.c.Interactions[match].Response
	header := http.Header{}
	for k, v := range rec.Header {
		header[http.CanonicalHeaderKey(k)] = v
	}
	return &http.Response{
		Status:        strconv.Itoa(rec.Status) + " " + http.StatusText(rec.Status),
		StatusCode:    rec.Status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        header,
		Body:          io.NopCloser(strings.NewReader(rec.Body)),
		ContentLength: int64(len(rec.Body)),
		Request:       req,
	}, nil
}

// canonical renders a JSON body with object keys sorted and no insignificant whitespace, so that
// the same request matches however the SDK ordered its fields. A body that is not JSON is kept
// as it is.
func canonical(body []byte) (string, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return "", nil
	}
	v, err := decode(body)
	if err != nil {
		return string(body), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func decode(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// firstDifference says where a request departs from a recorded one, for the miss error.
func firstDifference(rec Request, method, path string, body []byte) string {
	if rec.Method != method || rec.Path != path {
		return fmt.Sprintf("in method and path: recorded %s %s", rec.Method, rec.Path)
	}
	a, errA := decode(rec.Body)
	b, errB := decode(body)
	if errA != nil || errB != nil {
		return "in its body"
	}
	if where := diffAt("", a, b); where != "" {
		return "at " + where
	}
	return "in its body"
}

func diffAt(path string, a, b any) string {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			return orRoot(path)
		}
		keys := make([]string, 0, len(av)+len(bv))
		for k := range av {
			keys = append(keys, k)
		}
		for k := range bv {
			if _, seen := av[k]; !seen {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			if d := diffAt(joinPath(path, k), av[k], bv[k]); d != "" {
				return d
			}
		}
		return ""
	case []any:
		bv, ok := b.([]any)
		if !ok {
			return orRoot(path)
		}
		for i := range max(len(av), len(bv)) {
			if i >= len(av) || i >= len(bv) {
				return fmt.Sprintf("%s[%d]", path, i)
			}
			if d := diffAt(fmt.Sprintf("%s[%d]", path, i), av[i], bv[i]); d != "" {
				return d
			}
		}
		return ""
	default:
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if !bytes.Equal(ja, jb) {
			return orRoot(path)
		}
		return ""
	}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orRoot(path string) string {
	if path == "" {
		return "the top level"
	}
	return path
}
