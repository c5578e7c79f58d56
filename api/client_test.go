package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestClientProblems: an answer that is an error is a *Problem with its status and detail; a
// server that cannot be reached, and a URL that is not one, are one sentence naming the URL,
// never the token.
func TestClientProblems(t *testing.T) {
	srv := httptest.NewServer(New(Config{Principals: oaPrincipals()}))
	defer srv.Close()
	ctx := t.Context()

	var p *Problem
	_, err := NewClient(ClientConfig{URL: srv.URL, Token: "wrong-token"}).ListRuns(ctx, RunQuery{})
	if !errors.As(err, &p) || p.Status != http.StatusUnauthorized || strings.Contains(err.Error(), "wrong-token") {
		t.Errorf("unknown token: %v", err)
	}
	_, _, err = NewClient(ClientConfig{URL: srv.URL + "/", Token: oaTokens["viewer"]}).Decide(ctx, "r-1", "c-1", true, "")
	if !errors.As(err, &p) || p.Status != http.StatusForbidden || !strings.Contains(p.Detail, "principal viewer") {
		t.Errorf("a viewer's decision: %v", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	err = NewClient(ClientConfig{URL: dead, Token: "secret-token"}).Cancel(ctx, "r-1", "")
	if err == nil || errors.As(err, &p) || !strings.Contains(err.Error(), "the reins server at "+dead+" cannot be reached") || strings.Contains(err.Error(), "secret-token") {
		t.Errorf("a dead server: %v", err)
	}
	for _, u := range []string{"127.0.0.1:7400", "ftp://x", "http://user:pw@host:1", "http://h:1/?x=1", ""} {
		_, err := NewClient(ClientConfig{URL: u}).GetRun(ctx, "r")
		if err == nil || strings.Contains(err.Error(), "pw") {
			t.Errorf("URL %q: %v", u, err)
		}
	}
}

// TestClientEvents: the event stream's messages are read in order, comments skipped, up to
// the end message; a stream cut in a message is an error.
func TestClientEvents(t *testing.T) {
	var last string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		last = r.Header.Get("Last-Event-ID")
		if r.Header.Get("Authorization") != "Bearer t" || strings.Contains(r.URL.String(), "Bearer") {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		body := ": keep-alive\n\nid: 7\nevent: event\ndata: {\"run_id\":\"r\",\"type\":\"start\",\"at\":\"2026-11-27T16:40:00Z\",\"item\":-1}\n\n" +
			"event: status\ndata: {\"run_id\":\"r\",\"status\":\"running\",\"output\":null,\"error\":null,\"steps\":[],\"path\":[]}\n\n" +
			"event: delta\ndata: {\"step\":\"a\",\"iteration\":1,\"text\":\"hi\"}\n\n" +
			"event: end\ndata: {\"status\":\"completed\"}\n\nevent: event\ndata: {}\n\n"
		if r.URL.Path == "/v1/runs/cut/events" {
			body = "event: status\ndata: {\"run_id\""
		}
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	c := NewClient(ClientConfig{URL: srv.URL, Token: "t"})
	var kinds []string
	for m, err := range c.Events(context.Background(), "r", "6") {
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, m.Kind)
		switch m.Kind {
		case "event":
			if m.ID != "7" || m.Event.Type != "start" || m.Event.Item != -1 {
				t.Errorf("event %+v", m)
			}
		case "status":
			if m.Status.Status != "running" {
				t.Errorf("status %+v", m.Status)
			}
		case "delta":
			if m.Delta.Text != "hi" {
				t.Errorf("delta %+v", m.Delta)
			}
		case "end":
			if m.End != "completed" {
				t.Errorf("end %q", m.End)
			}
		}
	}
	if strings.Join(kinds, ",") != "event,status,delta,end" || last != "6" {
		t.Errorf("messages %v, Last-Event-ID %q", kinds, last)
	}
	for _, err := range c.Events(context.Background(), "cut", "") {
		if err == nil || !strings.Contains(err.Error(), "the event stream of run cut") {
			t.Errorf("a cut stream: %v", err)
		}
	}
}
