package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/host"
	"github.com/reins-run/reins/internal/runtest"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// viewerToken is the token of the viewer principal "val" of the SSE tests.
const viewerToken = "tok-viewer-val"

// sseEnv is a real embedded NATS server with an engine and the built-in workers, the API over
// it (with a viewer principal) behind an httptest server, and a client of runs as admin.
type sseEnv struct {
	t      *testing.T
	ctx    context.Context
	client *client.Client
	url    string
	// ticks are the keep-alive ticks of every stream (api.Config.KeepAlive).
	ticks chan time.Time
	// served counts the requests being served (a stream that returned is not).
	served sync.WaitGroup
}

func newSSEEnv(t *testing.T) *sseEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	h, err := host.StartEmbedded(ctx, t.TempDir(), host.Config{Engine: true, Logger: runtest.Logger(t),
		Register: func(w *worker.Worker) error { return builtin.Register(w, builtin.Config{}) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	principals, err := operator.Default().Resolve(func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	principals.AddPrincipal("val", viewerToken, operator.RoleViewer)
	v := &sseEnv{t: t, ctx: ctx, client: client.NewClient(client.ClientConfig{Box: h.Box()}), ticks: make(chan time.Time)}
	srv := api.New(api.Config{Box: h.Box(), Principals: principals, Log: runtest.Logger(t),
		KeepAlive: func() (<-chan time.Time, func()) { return v.ticks, func() {} }})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v.served.Add(1)
		defer v.served.Done()
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	v.url = hs.URL
	return v
}

// start starts a run of the workflow b builds, with id runID.
func (v *sseEnv) start(b *workflow.Builder, runID string) {
	v.t.Helper()
	_, bs := runtest.Bundles(v.t, b)
	if _, err := v.client.Start(v.ctx, bs, nil, runID); err != nil {
		v.t.Fatal(err)
	}
}

// wait waits for run runID to satisfy ok.
func (v *sseEnv) wait(runID string, ok func(*client.Record) bool) *client.Record {
	v.t.Helper()
	for rec, err := range v.client.Watch(v.ctx, runID) {
		if err != nil {
			v.t.Fatal(err)
		}
		if ok(rec) {
			return rec
		}
	}
	v.t.Fatalf("run %s ended before the wait", runID)
	return nil
}

// msg is one message of an event stream: an event (with its id and data) or a comment.
type msg struct {
	ID, Event, Data, Comment string
}

// stream is an open GET /v1/runs/{id}/events.
type stream struct {
	t      *testing.T
	resp   *http.Response
	cancel context.CancelFunc
	msgs   chan msg
}

// get sends GET path with the viewer's token (none when token is "") and header lastID
// as Last-Event-ID when not "".
func (v *sseEnv) get(path, token, lastID string) *http.Response {
	v.t.Helper()
	req, err := http.NewRequestWithContext(v.ctx, http.MethodGet, v.url+path, nil)
	if err != nil {
		v.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		v.t.Fatal(err)
	}
	return resp
}

// open opens the events of runID, after lastID when not "".
func (v *sseEnv) open(runID, lastID string) *stream {
	v.t.Helper()
	ctx, cancel := context.WithCancel(v.ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.url+"/v1/runs/"+runID+"/events", nil)
	if err != nil {
		v.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		v.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		body, _ := io.ReadAll(resp.Body)
		cancel()
		v.t.Fatalf("GET events: %s %s: %s", resp.Status, resp.Header.Get("Content-Type"), body)
	}
	s := &stream{t: v.t, resp: resp, cancel: cancel, msgs: make(chan msg, 64)}
	go s.read()
	v.t.Cleanup(s.close)
	return s
}

// read parses the stream into msgs, closed at its end.
func (s *stream) read() {
	defer close(s.msgs)
	r := bufio.NewReader(s.resp.Body)
	var m msg
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if m != (msg{}) {
				s.msgs <- m
			}
			m = msg{}
		case strings.HasPrefix(line, ":"):
			m.Comment = strings.TrimSpace(strings.TrimPrefix(line, ":"))
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				m.ID = value
			case "event":
				m.Event = value
			case "data":
				m.Data += value
			}
		}
	}
}

// next returns the next message; ok is false at the end of the stream.
func (s *stream) next() (msg, bool) {
	s.t.Helper()
	select {
	case m, ok := <-s.msgs:
		if ok && m.Event != "" { // every message is what the OpenAPI document says
			api.CheckSSEMessage(s.t, m.Event, []byte(m.Data))
		}
		return m, ok
	case <-time.After(30 * time.Second):
		s.t.Fatal("no message of the event stream within 30 s")
		return msg{}, false
	}
}

// until reads messages up to and including the first that stop accepts, and returns them.
func (s *stream) until(stop func(msg) bool) []msg {
	s.t.Helper()
	var got []msg
	for {
		m, ok := s.next()
		if !ok {
			s.t.Fatalf("the stream ended before the message awaited; got %+v", got)
		}
		got = append(got, m)
		if stop(m) {
			return got
		}
	}
}

// rest reads every message up to the end of the stream.
func (s *stream) rest() []msg {
	s.t.Helper()
	var got []msg
	for {
		m, ok := s.next()
		if !ok {
			return got
		}
		got = append(got, m)
	}
}

// close disconnects.
func (s *stream) close() {
	s.cancel()
	_ = s.resp.Body.Close()
}

// decode decodes m's data into v.
func decode(t *testing.T, m msg, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(m.Data), v); err != nil {
		t.Fatalf("message %+v: %v", m, err)
	}
}
