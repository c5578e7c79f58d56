package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/workflow"
)

// The event streams of the tests of GET /v1/runs/{id}/events, on a stack (newStackWith with
// Ticks: the keep-alive comments come when the test sends a tick).

// startBuilt starts a run of the workflow b builds, with id runID, as the admin.
func (s *stack) startBuilt(b *workflow.Builder, runID string) {
	s.t.Helper()
	_, bs := runtest.Bundles(s.t, b)
	if _, err := s.Admin.Start(s.Ctx, bs, nil, runID); err != nil {
		s.t.Fatal(err)
	}
}

// msg is one message of an event stream: an event (with its id and data) or a comment.
type msg struct {
	ID, Event, Data, Comment string
}

// stream is an open GET /v1/runs/{id}/events.
type stream struct {
	t      testing.TB
	resp   *http.Response
	cancel context.CancelFunc
	msgs   chan msg
}

// open opens the events of runID as the viewer vera, after lastID when not "".
func (v *stack) open(runID, lastID string) *stream {
	v.t.Helper()
	ctx, cancel := context.WithCancel(v.Ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.URL+"/v1/runs/"+runID+"/events", nil)
	if err != nil {
		v.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+v.Tokens["vera"])
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
func decode(t testing.TB, m msg, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(m.Data), v); err != nil {
		t.Fatalf("message %+v: %v", m, err)
	}
}
