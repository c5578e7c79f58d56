package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/trigger"
)

// startBody is the body of POST /v1/runs as the route reads it.
func startRequest() *http.Request { return httptest.NewRequest("POST", "/v1/runs", nil) }

// TestDecodeJSON: a body is read as I-JSON of the route's members, exactly: each refusal is
// one sentence with the status docs/api.md gives (400 for a body that is not the route's
// JSON, 422 for JSON nested deeper than reins takes), naming the member or the byte.
func TestDecodeJSON(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, c := range []struct {
		name, body string
		status     int
		says       []string
	}{
		{"the route's members", `{"workflow": "a", "input": {"x": [1, "\ud83d\ude00"]}, "version": 2, "run_id": "r-1"}`, 0, nil},
		{"a member in another case", `{"Workflow": "a"}`, 400, []string{`"Workflow"`, `"workflow"`, "case"}},
		{"a member it does not take", `{"workflow": "a", "owner": "bob"}`, 400, []string{`"owner"`, `"workflow", "input", "version" and "run_id"`}},
		{"a member twice", `{"workflow": "a", "workflow": "b"}`, 400, []string{`"workflow" twice`, "byte 18"}},
		{"a member twice in the input", `{"workflow": "a", "input": {"x": {"y": 1, "y": 2}}}`, 400, []string{`"y" twice`, `"/input/x"`}},
		{"a lone surrogate", `{"workflow": "a", "input": "\ud800"}`, 400, []string{"lone surrogate", `"/input"`, "byte"}},
		{"a lone low surrogate", `{"workflow": "a", "input": ["\udc00x"]}`, 400, []string{"lone surrogate", "byte"}},
		{"invalid UTF-8", "{\"workflow\": \"a\xff\"}", 400, []string{"invalid UTF-8", `"/workflow"`, "byte 15"}},
		{"invalid UTF-8 in a name", "{\"work\xc0\": \"a\"}", 400, []string{"invalid UTF-8", "byte"}},
		{"two values", `{"workflow": "a"}  {"workflow": "b"}`, 400, []string{"more than one", "byte 19"}},
		{"not JSON", `{"workflow": a}`, 400, []string{"not JSON", "byte 13"}},
		{"cut short", `{"workflow": "a", "input": [1, 2`, 400, []string{"ends", "byte 32"}},
		{"an array", `[1]`, 400, []string{"array", `"workflow"`}},
		{"a member of another type", `{"workflow": 7}`, 400, []string{`"workflow"`, "number", "a string"}},
		{"a fraction for a version", `{"workflow": "a", "version": 1.5}`, 400, []string{`"version"`, "whole number"}},
		{"256 deep in the input", `{"workflow": "a", "input": ` + deep(256) + `}`, 0, nil},
		{"257 deep in the input", `{"workflow": "a", "input": ` + deep(257) + `}`, 422, []string{"256", "byte 283"}},
		{"100k deep", `{"workflow": "a", "input": ` + deep(100000) + `}`, 422, []string{"256", "byte 283"}},
		{"100k deep, unclosed", `{"workflow": "a", "input": ` + strings.Repeat("[", 100000), 422, []string{"256"}},
	} {
		var got RunStart
		err := decodeJSON(startRequest(), []byte(c.body), &got, false)
		if c.status == 0 {
			if err != nil {
				t.Errorf("%s: %v, want it read", c.name, err)
			}
			continue
		}
		var p *Problem
		if !errors.As(err, &p) || p.Status != c.status {
			t.Errorf("%s: %v, want %d", c.name, err, c.status)
			continue
		}
		if strings.ContainsAny(p.Detail, "\r\n") || strings.Contains(p.Detail, ". ") {
			t.Errorf("%s: the detail is not one sentence: %q", c.name, p.Detail)
		}
		for _, w := range c.says {
			if !strings.Contains(p.Detail, w) {
				t.Errorf("%s: %q does not say %s", c.name, p.Detail, w)
			}
		}
	}
	// An optional body may be empty; a required one names its members.
	var cancel struct {
		Reason string `json:"reason"`
	}
	if err := decodeJSON(startRequest(), []byte(" \n"), &cancel, true); err != nil {
		t.Errorf("an empty optional body: %v", err)
	}
	if err := decodeJSON(startRequest(), nil, &RunStart{}, false); err == nil || !strings.Contains(err.Error(), `"workflow"`) {
		t.Errorf("an empty body: %v, want 400 naming the members", err)
	}
}

// FuzzDecodeJSON: whatever the bytes, a body is refused with 400 or 422 in one sentence, or
// read; and a body read means the same to every reader: encoding/json (which matches names in
// any case, and takes the last of a member twice) reads the same members from it, and it is
// valid UTF-8 with no member twice and no value deeper than reins takes.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"workflow": "a", "input": {"x": 1}, "version": 2, "run_id": "r"}`,
		`{"Workflow": "a"}`, `{"workflow": "a", "workflow": "b"}`, `{"workflow": "a", "input": "\ud800"}`,
		`{"workflow": "a", "input": [[[[[]]]]]}`, `{"workflow":"a"} x`, `[1]`, `{"version": 1e3}`, "{\"workflow\": \"\xff\"}",
		`{"input": {"a": 1, "A": 2}}`, `{"workflow": "\u00e9"}`, `{"run_id": null, "input": null}`, ``, `{"input": "\ud83d\ude00"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got RunStart
		err := decodeJSON(startRequest(), data, &got, true)
		if err != nil {
			var p *Problem
			if !errors.As(err, &p) || (p.Status != 400 && p.Status != 422) {
				t.Fatalf("%q: %v, want a 400 or 422 problem", data, err)
			}
			if p.Detail == "" || strings.ContainsAny(p.Detail, "\r\n") {
				t.Fatalf("%q: detail %q is not one line", data, p.Detail)
			}
			return
		}
		if len(bytes.TrimSpace(data)) == 0 {
			return
		}
		if !utf8.Valid(data) {
			t.Fatalf("%q: read, but not UTF-8", data)
		}
		if _, err := jsontext.Value(data).Clone(), jsontext.NewDecoder(bytes.NewReader(data)).SkipValue(); err != nil {
			t.Fatalf("%q: read, but not I-JSON: %v", data, err)
		}
		if err := wire.CheckJSON(got.Input, 0); len(got.Input) > 0 && err != nil {
			t.Fatalf("%q: read an input reins does not take: %v", data, err)
		}
		var lax RunStart
		if err := json.Unmarshal(data, &lax); err != nil {
			t.Fatalf("%q: read by the API, refused by encoding/json: %v", data, err)
		}
		if !reflect.DeepEqual(got.Workflow, lax.Workflow) || got.Version != lax.Version || got.RunID != lax.RunID || !bytes.Equal(got.Input, lax.Input) {
			t.Fatalf("%q: the API reads %+v, encoding/json %+v", data, got, lax)
		}
	})
}

// hookRecorder stands for the trigger service at the route's boundary: it records the
// deliveries the route let through.
type hookRecorder struct{ bodies [][]byte }

func (h *hookRecorder) Deliver(_ context.Context, _ string, body json.RawMessage, _ string) ([]trigger.Started, error) {
	h.bodies = append(h.bodies, bytes.Clone(body))
	return []trigger.Started{{RunID: "r-1", Workflow: "w", Version: 1, Trigger: "t"}}, nil
}

const fuzzHookSecret = "fuzz-secret"

func hookServer(t testing.TB, hooks Hooks) *Server {
	t.Helper()
	cfg := &operator.Config{Webhooks: map[string]operator.Webhook{"in": {SecretEnv: "S"}}}
	res, err := cfg.Resolve(func(string) string { return fuzzHookSecret }, nil)
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{Principals: res, Hooks: hooks, MaxWebhookBytes: 4 << 10})
}

// FuzzHook: a delivery reaches the trigger service only when its signature is the body's with
// the hook's secret and its body is a JSON object reins takes, within the limit; every other is
// answered with a problem of one sentence, and the secret is never in an answer.
func FuzzHook(f *testing.F) {
	f.Add([]byte(`{"order": 1}`), uint8(0), "", int64(-1))
	f.Add([]byte(`{"order": 1}`), uint8(1), "", int64(-1))
	f.Add([]byte(`{"a": 1, "a": 2}`), uint8(0), "d-1", int64(-1))
	f.Add([]byte(`[1]`), uint8(0), "", int64(3))
	f.Add([]byte(`{"x": "\ud800"}`), uint8(0), "", int64(99999))
	f.Add([]byte(strings.Repeat("[", 300)), uint8(0), "d 1", int64(-1))
	f.Add([]byte(`{}`), uint8(2), "sha256=zz", int64(-1))
	rec := &hookRecorder{}
	s := hookServer(f, rec) // one server: a process's iterations run one at a time
	f.Fuzz(func(t *testing.T, body []byte, sigKind uint8, text string, claimed int64) {
		rec.bodies = nil
		req := httptest.NewRequest("POST", "/v1/hooks/in", bytes.NewReader(body))
		switch sigKind % 3 {
		case 0:
			req.Header.Set(trigger.SignatureHeader, trigger.Sign([]byte(fuzzHookSecret), body))
		case 1:
			req.Header.Set(trigger.SignatureHeader, trigger.Sign([]byte("guess"), body))
		default:
			req.Header.Set(trigger.SignatureHeader, text)
		}
		if sigKind%3 != 2 && utf8.ValidString(text) && !strings.ContainsAny(text, "\r\n\x00") {
			req.Header.Set(trigger.DeliveryHeader, text)
		}
		if claimed >= 0 {
			req.ContentLength = claimed
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		answer := w.Body.String()
		if strings.Contains(answer, fuzzHookSecret) {
			t.Fatalf("the answer holds the secret: %s", answer)
		}
		signed := trigger.Verify([]byte(fuzzHookSecret), body, req.Header.Get(trigger.SignatureHeader))
		if w.Code == http.StatusAccepted {
			if len(rec.bodies) != 1 || !bytes.Equal(rec.bodies[0], body) {
				t.Fatalf("202, but the service was given %q", rec.bodies)
			}
			if !signed || len(body) > 4<<10 || checkJSON("", body, 0) != nil || !bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("{")) {
				t.Fatalf("a delivery let through: signed %v, %d bytes, %q", signed, len(body), body)
			}
			return
		}
		if len(rec.bodies) != 0 {
			t.Fatalf("%d, but the service was given %q", w.Code, rec.bodies)
		}
		var p Problem
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != w.Code || p.Detail == "" || strings.ContainsAny(p.Detail, "\r\n") {
			t.Fatalf("%d %s: not a problem of one sentence (%v)", w.Code, answer, err)
		}
		if w.Code == http.StatusUnauthorized && signed {
			t.Fatalf("401 for a delivery the secret signs: %s", answer)
		}
	})
}

// TestHookOrder: a delivery is refused by its cheap checks before its body is read: an
// unknown hook, a Content-Length over the limit, a signature header that cannot be one.
func TestHookOrder(t *testing.T) {
	s := hookServer(t, &hookRecorder{})
	for _, c := range []struct {
		path, sig string
		length    int64
		status    int
	}{
		{"/v1/hooks/out", anySig, 10, http.StatusNotFound},
		{"/v1/hooks/in", anySig, 4<<10 + 1, http.StatusRequestEntityTooLarge},
		{"/v1/hooks/in", "", 10, http.StatusUnauthorized},
		{"/v1/hooks/in", "sha256=" + strings.Repeat("g", 64), 10, http.StatusUnauthorized},
		{"/v1/hooks/in", "sha256=abc", 10, http.StatusUnauthorized},
	} {
		body := &unread{}
		req := httptest.NewRequest("POST", c.path, body)
		req.ContentLength = c.length
		if c.sig != "" {
			req.Header.Set(trigger.SignatureHeader, c.sig)
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		if w.Code != c.status || body.read {
			t.Errorf("%s with signature %q, %d bytes: %d, body read %v; want %d, unread", c.path, c.sig, c.length, w.Code, body.read, c.status)
		}
	}
}

const anySig = "sha256=0000000000000000000000000000000000000000000000000000000000000000"

// unread is a body that records whether anything read it.
type unread struct{ read bool }

func (u *unread) Read([]byte) (int, error) {
	u.read = true
	return 0, fmt.Errorf("the body was read")
}
