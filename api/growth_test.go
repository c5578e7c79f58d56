package api_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
)

// namedTOML waits for the event go, then for bob's approval: bob is the one approver its
// workflow names.
const namedTOML = `name = "named"

[[steps]]
id = "hold"
type = "wait_event"
event = "go"

[[steps]]
id = "ok"
type = "approval"
prompt = "Go on?"
approvers = ["bob"]

[[edges]]
from = "hold"
to = "ok"
`

// TestSignalRefused: only the run's submitter, the approvers its workflow names and admins
// may signal or resume it. Anyone else's is 403 in one sentence naming the principal, and
// nothing of it is sent (the run's events hold none of theirs); a named approver's is taken.
func TestSignalRefused(t *testing.T) {
	s := newStack(t)
	id := s.start(namedTOML, "")
	s.waiting(id)
	paused := s.start(pauseTOML, "")
	s.waiting(paused)
	for _, c := range []struct {
		who, path, body string
		want            int
		detail          string
	}{
		{"alice", "/v1/runs/" + id + "/signals/go", `{"data":"alice's"}`, http.StatusForbidden,
			"principal alice may not signal this run: only its submitter (admin), the approvers its workflow names (bob) and admins may"},
		{"alice", "/v1/runs/" + paused + "/resume", `{"input":"alice's"}`, http.StatusForbidden,
			"principal alice may not resume this run: only its submitter (admin) and admins may"},
		{"bob", "/v1/runs/" + paused + "/resume", `{"input":"bob's"}`, http.StatusForbidden,
			"principal bob may not resume this run: only its submitter (admin) and admins may"},
		{"viewer", "/v1/runs/" + id + "/signals/go", `{"data":"vera's"}`, http.StatusForbidden, "vera"},
	} {
		a := s.as(c.who, "POST", c.path, c.body)
		if p := a.problem(t); a.Status != c.want || !strings.Contains(p.Detail, c.detail) {
			t.Errorf("%s POST %s: %d %q, want %d with %q", c.who, c.path, a.Status, p.Detail, c.want, c.detail)
		}
	}
	for _, run := range []string{id, paused} {
		evs, err := s.Admin.Events(s.Ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.IndexFunc(evs, func(ev protocol.Event) bool { return ev.By != "" && ev.By != "admin" }); i >= 0 {
			t.Errorf("run %s holds the refused %s of %s", run, evs[i].Type, evs[i].By)
		}
	}
	if a := s.as("bob", "POST", "/v1/runs/"+id+"/signals/go", `{"data":"bob's"}`); a.Status != http.StatusAccepted {
		t.Fatalf("bob, a named approver, signals: %d %s, want 202", a.Status, a.Body)
	}
	// The run waits before and after the signal (for it, then for the approval): wait for the
	// step to end, not for the run to wait.
	rec := s.waitFor(id, func(r *client.Record) bool { return r.Run.Steps["hold"].Status != protocol.StepWaiting })
	if got := rec.Run.Steps["hold"]; got.Status != protocol.StepCompleted || string(got.Output) != `"bob's"` {
		t.Fatalf("step hold is %s with %s, want completed with bob's signal", got.Status, got.Output)
	}
}

// TestSignalLimit: a run takes as many signals as its server allows (max_signals_per_run);
// the one past it is 403 naming the limit, and not sent.
func TestSignalLimit(t *testing.T) {
	s := newStackWith(t, stackOptions{Limits: engine.Limits{MaxSignals: 2}})
	id := s.start(holdTOML, "")
	s.waiting(id)
	for i := range 2 {
		if a := s.as("admin", "POST", "/v1/runs/"+id+"/signals/later", fmt.Sprintf(`{"data":%d}`, i)); a.Status != http.StatusAccepted {
			t.Fatalf("signal %d: %d %s", i+1, a.Status, a.Body)
		}
	}
	s.waitFor(id, func(r *client.Record) bool { return len(r.Run.SignalIDs) == 2 })
	a := s.as("admin", "POST", "/v1/runs/"+id+"/signals/go", `{"data":3}`)
	if p := a.problem(t); a.Status != http.StatusForbidden || !strings.Contains(p.Detail, "principal admin may not signal this run: it took 2 signals, the most its server allows a run (max_signals_per_run)") {
		t.Fatalf("the third signal: %d %q, want 403 naming the limit", a.Status, p.Detail)
	}
	evs, err := s.Admin.Events(s.Ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(slices.DeleteFunc(evs, func(ev protocol.Event) bool { return ev.Type != protocol.EvSignal })); n != 2 {
		t.Fatalf("the run's events hold %d signals, want the 2 taken", n)
	}
}

// TestRunTracePaging: GET /v1/runs/{id} answers the first trace_limit events of the trace
// (default 100) with a cursor; the pages read in turn are the run's events, each once and in
// order; a page past the end is empty, with the same cursor; bad parameters are 400.
func TestRunTracePaging(t *testing.T) {
	s := newStack(t)
	id := s.start(holdTOML, "")
	s.waiting(id)
	for i := range 250 {
		if err := s.Admin.Signal(s.Ctx, id, "later", json.RawMessage(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	s.waitFor(id, func(r *client.Record) bool { return len(r.Run.SignalIDs) == 250 })
	all, err := s.Admin.Events(s.Ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var first api.RunDetail
	if a := s.as("viewer", "GET", "/v1/runs/"+id, ""); a.Status != http.StatusOK {
		t.Fatalf("GET: %d %s", a.Status, a.Body)
	} else {
		a.JSON(t, &first)
	}
	if len(first.Trace) != 100 || !first.TraceMore || first.TraceNext == "" || first.RunID != id {
		t.Fatalf("the first page: %d events, more %v, cursor %q; want 100 of %d, more, a cursor", len(first.Trace), first.TraceMore, first.TraceNext, len(all))
	}
	var got []protocol.Event
	cursor, pages := "", 0
	for {
		var d api.RunDetail
		a := s.as("viewer", "GET", "/v1/runs/"+id+"?trace_limit=120&trace_cursor="+cursor, "")
		if a.Status != http.StatusOK {
			t.Fatalf("page %d: %d %s", pages+1, a.Status, a.Body)
		}
		a.JSON(t, &d)
		got, cursor, pages = append(got, d.Trace...), d.TraceNext, pages+1
		if !d.TraceMore {
			break
		}
	}
	if pages != 3 || !jsonEqual(t, got, all) {
		t.Fatalf("%d pages of %d events; want 3 pages holding the run's %d events in order", pages, len(got), len(all))
	}
	var end api.RunDetail
	s.as("viewer", "GET", "/v1/runs/"+id+"?trace_cursor="+cursor, "").JSON(t, &end)
	if len(end.Trace) != 0 || end.TraceMore || end.TraceNext != cursor {
		t.Fatalf("past the end: %d events, more %v, cursor %q; want none, the same cursor", len(end.Trace), end.TraceMore, end.TraceNext)
	}
	whole, err := api.NewClient(api.ClientConfig{URL: s.URL, Token: s.Tokens["viewer"]}).GetRunTrace(s.Ctx, id)
	if err != nil || !jsonEqual(t, whole.Trace, all) {
		t.Fatalf("GetRunTrace: %d events (%v), want the run's %d", len(whole.Trace), err, len(all))
	}
	for _, q := range []string{"trace_limit=0", "trace_limit=1001", "trace_limit=x", "trace_cursor=bogus", "trace_cursor=" + base64.RawURLEncoding.EncodeToString([]byte("runs-newest:1"))} {
		if a := s.as("viewer", "GET", "/v1/runs/"+id+"?"+q, ""); a.Status != http.StatusBadRequest || !strings.Contains(a.problem(t).Detail, strings.Split(q, "=")[0]) {
			t.Errorf("GET ?%s: %d %s, want 400 naming the parameter", q, a.Status, a.Body)
		}
	}
}

func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}
