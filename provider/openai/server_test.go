package openai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// server is a local stand-in for the Chat Completions API: it records every request and answers
// the n-th one with replies[n] (the last reply answers any further request).
type server struct {
	*httptest.Server
	mu       sync.Mutex
	requests []recorded
}

// recorded is one request the server saw.
type recorded struct {
	Method, Path string
	Header       http.Header
	Body         map[string]any
}

func newServer(t *testing.T, replies ...http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(r.Body)
		var body map[string]any
		if err == nil {
			err = json.Unmarshal(raw, &body)
		}
		if err != nil {
			t.Errorf("server: request body is not a JSON object: %v: %s", err, raw)
		}
		s.mu.Lock()
		s.requests = append(s.requests, recorded{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		n := len(s.requests) - 1
		s.mu.Unlock()
		replies[min(n, len(replies)-1)](w, r.WithContext(context.WithValue(r.Context(), bodyKey{}, body)))
	}))
	t.Cleanup(s.Close)
	return s
}

type bodyKey struct{}

// streamRequested reports whether the request a reply handler answers asked for a stream.
func streamRequested(r *http.Request) bool {
	body, _ := r.Context().Value(bodyKey{}).(map[string]any)
	return body["stream"] == true
}

// BaseURL is where the client is pointed: the SDK appends chat/completions.
func (s *server) BaseURL() string { return s.URL + "/v1" }

// Requests returns a copy of the requests seen so far.
func (s *server) Requests() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.requests...)
}

// jsonReply answers with status and a JSON body.
func jsonReply(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// completion is a non-streaming reply with one choice holding message (a JSON object), ended
// by the model (finish_reason "stop").
func completion(message string, in, out int) string {
	return completionEnded(message, "stop", in, out)
}

// completionEnded is completion with the given finish_reason.
func completionEnded(message, finish string, in, out int) string {
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"gpt-test",`+
		`"choices":[{"index":0,"message":%s,"logprobs":null,"finish_reason":%s}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, message, quote(finish), in, out, in+out)
}

// sseReply streams chunks as server-sent events, flushing each, then data: [DONE].
func sseReply(chunks ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		writeChunks(w, chunks...)
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
}

func writeChunks(w http.ResponseWriter, chunks ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for _, c := range chunks {
		_, _ = io.WriteString(w, "data: "+c+"\n\n")
		w.(http.Flusher).Flush()
	}
}

// chunk is one streamed chunk of completion chatcmpl-1 with the given choices array.
func chunk(choices string) string {
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-test","choices":` + choices + `}`
}

func roleChunk() string {
	return chunk(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`)
}

func textChunk(text string) string {
	return chunk(fmt.Sprintf(`[{"index":0,"delta":{"content":%s},"finish_reason":null}]`, quote(text)))
}

// callStart opens tool call index with its id and name (and a first arguments fragment).
func callStart(index int, id, name, args string) string {
	return chunk(fmt.Sprintf(`[{"index":0,"delta":{"tool_calls":[{"index":%d,"id":%s,"type":"function","function":{"name":%s,"arguments":%s}}]},"finish_reason":null}]`,
		index, quote(id), quote(name), quote(args)))
}

// callArgs continues tool call index with an arguments fragment.
func callArgs(index int, args string) string {
	return chunk(fmt.Sprintf(`[{"index":0,"delta":{"tool_calls":[{"index":%d,"function":{"arguments":%s}}]},"finish_reason":null}]`, index, quote(args)))
}

func finishChunk(reason string) string {
	return chunk(fmt.Sprintf(`[{"index":0,"delta":{},"finish_reason":%s}]`, quote(reason)))
}

// usageChunk is the last chunk of a stream with include_usage: no choices, the usage.
func usageChunk(in, out int) string {
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-test","choices":[],` +
		fmt.Sprintf(`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, in, out, in+out)
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// jsonEqual reports whether got (decoded JSON) equals the JSON text want.
func jsonEqual(t *testing.T, what string, got any, want string) {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad expected JSON: %v", what, err)
	}
	if !reflect.DeepEqual(normalize(got), w) {
		g, _ := json.Marshal(got)
		t.Errorf("%s:\n got %s\nwant %s", what, g, strings.TrimSpace(want))
	}
}

// normalize round-trips v through JSON so it compares equal to decoded JSON text.
func normalize(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}
