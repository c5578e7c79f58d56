package anthropic_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/reins-run/reins/provider"
	"github.com/reins-run/reins/provider/anthropic"
)

// testModel is the model name the fake server is asked for.
const testModel = "claude-test-1"

// fakeServer is a local server speaking the Messages wire protocol. Each request is answered
// by the next handler; it records every request it receives.
type fakeServer struct {
	t        *testing.T
	srv      *httptest.Server
	handlers []handler

	mu   sync.Mutex
	reqs []recorded
}

// handler answers one request; body is the decoded request body.
type handler func(w http.ResponseWriter, r *http.Request, body map[string]any)

type recorded struct {
	Method, Path string
	Header       http.Header
	Body         map[string]any
}

func newServer(t *testing.T, handlers ...handler) *fakeServer {
	t.Helper()
	s := &fakeServer{t: t, handlers: handlers}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		s.t.Errorf("reading the request body: %v", err)
		return
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		s.t.Errorf("request body is not JSON: %v\n%s", err, raw)
	}
	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, recorded{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	s.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		s.t.Errorf("request %d: %s %s, want POST /v1/messages", n, r.Method, r.URL.Path)
	}
	if n >= len(s.handlers) {
		s.t.Errorf("unexpected request %d (only %d replies scripted)", n+1, len(s.handlers))
		http.Error(w, `{"type":"error","error":{"type":"api_error","message":"no reply scripted"}}`, http.StatusInternalServerError)
		return
	}
	s.handlers[n](w, r, body)
}

// requests returns what the server received so far.
func (s *fakeServer) requests() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.reqs...)
}

// config is a client config for this server; the key is "test-key".
func (s *fakeServer) config() provider.Config {
	return provider.Config{Model: testModel, BaseURL: s.srv.URL, APIKey: "test-key", HTTPClient: s.srv.Client()}
}

func (s *fakeServer) model(cfg provider.Config) *anthropic.Model {
	s.t.Helper()
	m, err := anthropic.New(cfg)
	if err != nil {
		s.t.Fatalf("New: %v", err)
	}
	return m
}

// block is one content block of a scripted reply.
type block struct {
	Type  string // "text" or "tool_use"
	Text  string
	ID    string
	Name  string
	Input string // raw input JSON of a tool_use (possibly malformed when streamed)
	// Pieces are the partial_json deltas of a streamed tool_use; nil splits Input in pieces of
	// at most 7 bytes.
	Pieces []string
}

// reply is a scripted assistant message, sent whole as JSON or streamed as SSE events.
type reply struct {
	Blocks                         []block
	Stop                           string // stop_reason
	In, Out, CacheWrite, CacheRead int64
	Model                          string // the model the server names; "" is testModel
}

// served is the model the reply names.
func (r reply) served() string {
	if r.Model == "" {
		return testModel
	}
	return r.Model
}

func text(s string) block { return block{Type: "text", Text: s} }

func toolUse(id, name, input string) block {
	return block{Type: "tool_use", ID: id, Name: name, Input: input}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func (r reply) usage(out int64) map[string]any {
	return map[string]any{"input_tokens": r.In, "output_tokens": out,
		"cache_creation_input_tokens": r.CacheWrite, "cache_read_input_tokens": r.CacheRead}
}

// message is the whole message as the non-streaming API returns it.
func (r reply) message() string {
	content := []string{}
	for _, b := range r.Blocks {
		switch b.Type {
		case "text":
			content = append(content, mustJSON(map[string]any{"type": "text", "text": b.Text}))
		case "tool_use":
			input := b.Input
			if input == "" {
				input = "{}"
			}
			content = append(content, fmt.Sprintf(`{"type":"tool_use","id":%q,"name":%q,"input":%s}`, b.ID, b.Name, input))
		}
	}
	return fmt.Sprintf(`{"id":"msg_test","type":"message","role":"assistant","model":%q,"content":[%s],"stop_reason":%q,"stop_sequence":null,"usage":%s}`,
		r.served(), strings.Join(content, ","), r.Stop, mustJSON(r.usage(r.Out)))
}

// events are the SSE events of the streamed message, message_stop last.
func (r reply) events() []string {
	start := fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_test","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":%s}}`,
		r.served(), mustJSON(r.usage(1)))
	evs := []string{sse("message_start", start), sse("ping", `{"type":"ping"}`)}
	for i, b := range r.Blocks {
		switch b.Type {
		case "text":
			evs = append(evs, sse("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"text","text":""}}`, i)))
			for _, piece := range split(b.Text, 6) {
				evs = append(evs, sse("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":%s}}`, i, mustJSON(piece))))
			}
		case "tool_use":
			evs = append(evs, sse("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"tool_use","id":%q,"name":%q,"input":{}}}`, i, b.ID, b.Name)))
			pieces := b.Pieces
			if pieces == nil {
				pieces = split(b.Input, 7)
			}
			for _, piece := range pieces {
				evs = append(evs, sse("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":%s}}`, i, mustJSON(piece))))
			}
		}
		evs = append(evs, sse("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, i)))
	}
	evs = append(evs,
		sse("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":%d}}`, r.Stop, r.Out)),
		sse("message_stop", `{"type":"message_stop"}`))
	return evs
}

func sse(event, data string) string { return "event: " + event + "\ndata: " + data + "\n\n" }

// split cuts s in pieces of at most n bytes (s is ASCII in these tests).
func split(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// writeEvents streams events, flushing after each.
func writeEvents(w http.ResponseWriter, events []string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f := w.(http.Flusher)
	for _, e := range events {
		io.WriteString(w, e)
		f.Flush()
	}
}

// answer replies with r, streamed when the request asked for a stream.
func answer(r reply) handler {
	return func(w http.ResponseWriter, _ *http.Request, body map[string]any) {
		if body["stream"] == true {
			writeEvents(w, r.events())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, r.message())
	}
}

// fail replies with an API error.
func fail(status int, header http.Header, errType, message string) handler {
	return func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		for k, v := range header {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, mustJSON(map[string]any{"type": "error", "error": map[string]any{"type": errType, "message": message}}))
	}
}
