package api_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/telemetry"
)

// The workflows of the tests.
const (
	// quickTOML ends at once.
	quickTOML = `name = "quick"

[[steps]]
id = "end"
type = "terminate"
`
	// reviewTOML waits for anyone's decision.
	reviewTOML = `name = "review"

[[steps]]
id = "ask"
type = "approval"
prompt = "Ship it?"
`
	// gateTOML waits for alice's decision.
	gateTOML = `name = "gate"

[[steps]]
id = "ask"
type = "approval"
prompt = "Ship it?"
approvers = ["alice"]
`
	// holdTOML waits for the event go.
	holdTOML = `name = "hold"

[[steps]]
id = "hold"
type = "wait_event"
event = "go"
`
	// sleepTOML runs for an hour without waiting for anyone.
	sleepTOML = `name = "sleeper"

[[steps]]
id = "nap"
type = "sleep"
duration = "1h"
`
	// pauseTOML's agent escalates, waits for a person's answer, then ends.
	pauseTOML = `name = "pause"

[models.m]
provider = "scripted"
script = [
  { escalate = "the invoice differs from the order" },
  { text = "Thanks, all clear." },
]

[[steps]]
id = "think"
type = "agent"
model = "m"
goal = "Check the order."
on_needs_human = "pause"
`
	// draftTOML's agent proposes a call that needs approval, then ends.
	draftTOML = `name = "draft"

[models.m]
provider = "scripted"
script = [
  { tool_calls = [{ name = "send", arguments = { to = "finance" } }] },
  { text = "Sent to finance." },
]

[tools.send]
description = "Send the draft."
input_schema = { type = "object", properties = { to = { type = "string" } }, required = ["to"] }
side_effect = true
mock = [{ output = { ok = true } }]

[[steps]]
id = "act"
type = "agent"
model = "m"
goal = "Send the draft to finance."
tools = ["send"]
policy = { allow = ["send"], require_approval = ["send"] }
`
)

// TestRunRoutesAuth: every run route answers 401 without a token or with one nobody has
// (WWW-Authenticate: Bearer), and 403 naming the principal for a role that may not call it.
func TestRunRoutesAuth(t *testing.T) {
	s := newStack(t)
	id := s.start(reviewTOML, "")
	s.waiting(id)
	routes := []struct {
		method, path, body string
		forbidden          []string // principals that get 403
	}{
		{"GET", "/v1/runs", "", []string{"wanda"}},
		{"GET", "/v1/runs/" + id, "", []string{"wanda"}},
		{"GET", "/v1/runs/" + id + "/iterations/ask/1", "", []string{"wanda"}},
		{"POST", "/v1/runs/" + id + "/cancel", "", []string{"wanda", "vera"}},
		{"POST", "/v1/runs/" + id + "/approvals/ask", `{"decision":"approve"}`, []string{"wanda", "vera", "sam"}},
		{"POST", "/v1/runs/" + id + "/signals/go", `{"data":1}`, []string{"wanda", "vera", "sam"}},
		{"POST", "/v1/runs/" + id + "/resume", `{"input":"hi"}`, []string{"wanda", "vera", "sam"}},
	}
	for _, rt := range routes {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			for _, token := range []string{"", "tok-nobody"} {
				a := s.do(rt.method, rt.path, token, rt.body)
				if a.Status != http.StatusUnauthorized || !strings.HasPrefix(a.Header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("token %q: %d %s, want 401 with WWW-Authenticate: Bearer", token, a.Status, a.Body)
					continue
				}
				a.problem(t)
			}
			for _, name := range rt.forbidden {
				a := s.as(name, rt.method, rt.path, rt.body)
				if a.Status != http.StatusForbidden {
					t.Errorf("as %s: %d %s, want 403", name, a.Status, a.Body)
					continue
				}
				if p := a.problem(t); !strings.Contains(p.Detail, "principal "+name) {
					t.Errorf("as %s: detail %q does not name the principal", name, p.Detail)
				}
			}
		})
	}
	assertWaiting(t, s, id)
}

// listPage is a page of GET /v1/runs as a test reads it.
type listPage struct {
	Runs []struct {
		RunID     string             `json:"run_id"`
		Workflow  string             `json:"workflow"`
		Status    protocol.RunStatus `json:"status"`
		StartedAt string             `json:"started_at"`
		Error     *protocol.RunError `json:"error"`
	} `json:"runs"`
	NextCursor *string `json:"next_cursor"`
}

// TestListRuns: GET /v1/runs lists runs newest first, by status and workflow, a page at a
// time: every run once across pages, the cursor of each page giving the next; bad parameters
// and a cursor the API did not give answer 400.
func TestListRuns(t *testing.T) {
	s := newStack(t)
	var quick, review []string // in the order they started
	for range 5 {
		id := s.start(quickTOML, "")
		s.wait(id)
		quick = append(quick, id)
	}
	for range 2 {
		id := s.start(reviewTOML, "")
		s.waiting(id)
		review = append(review, id)
	}
	newest := func(ids ...[]string) []string {
		all := slices.Concat(ids...)
		slices.Reverse(all)
		return all
	}
	// pages lists every page of query, following next_cursor.
	pages := func(t *testing.T, query string) [][]string {
		t.Helper()
		var out [][]string
		cursor := ""
		for len(out) <= 20 {
			q := query
			if cursor != "" {
				q += "&cursor=" + cursor
			}
			a := s.as("vera", "GET", "/v1/runs?"+q, "")
			if a.Status != http.StatusOK {
				t.Fatalf("GET /v1/runs?%s: %d %s", q, a.Status, a.Body)
			}
			var p listPage
			a.JSON(t, &p)
			if p.Runs == nil {
				t.Fatalf("GET /v1/runs?%s: runs is %s, want an array", q, a.Body)
			}
			var ids []string
			for _, r := range p.Runs {
				ids = append(ids, r.RunID)
				if r.Workflow == "" || r.Status == "" || r.StartedAt == "" {
					t.Errorf("run %+v: want its workflow, status and start", r)
				}
			}
			out = append(out, ids)
			if p.NextCursor == nil {
				return out
			}
			if *p.NextCursor == "" {
				t.Fatalf("next_cursor is empty, want it absent on the last page")
			}
			cursor = *p.NextCursor
		}
		t.Fatalf("GET /v1/runs?%s: more than 20 pages", query)
		return nil
	}
	for _, c := range []struct {
		query string
		want  [][]string
	}{
		{"", [][]string{newest(quick, review)}},
		{"limit=500", [][]string{newest(quick, review)}},
		{"limit=3", [][]string{newest(quick, review)[:3], newest(quick, review)[3:6], newest(quick, review)[6:]}},
		{"limit=2&workflow=quick", [][]string{newest(quick)[:2], newest(quick)[2:4], newest(quick)[4:]}},
		{"limit=1&status=waiting", [][]string{{review[1]}, {review[0]}}},
		{"status=completed&workflow=review", [][]string{nil}},
		{"limit=7", [][]string{newest(quick, review)}},
	} {
		t.Run(c.query, func(t *testing.T) {
			if got := pages(t, c.query); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("pages %v, want %v", got, c.want)
			}
		})
	}
	forged := base64.RawURLEncoding.EncodeToString([]byte("runs-newest:not-a-cursor"))
	for _, q := range []string{"limit=0", "limit=501", "limit=ten", "status=corrupt", "status=done", "workflow=a.b", "workflow=%3E", "cursor=" + forged, "cursor=%21%21", "cursor=" + base64.RawURLEncoding.EncodeToString([]byte("00000000000000000001.r-x"))} {
		a := s.as("vera", "GET", "/v1/runs?"+q, "")
		if a.Status != http.StatusBadRequest {
			t.Errorf("GET /v1/runs?%s: %d %s, want 400", q, a.Status, a.Body)
			continue
		}
		name, _, _ := strings.Cut(q, "=")
		if p := a.problem(t); !strings.Contains(p.Detail, name) {
			t.Errorf("GET /v1/runs?%s: detail %q does not name %s", q, p.Detail, name)
		}
	}
}

// TestGetRunTrace: GET /v1/runs/{id} carries the run's trace id, the one its spans have, and
// with the operator's [console] trace_url the address of that trace, for the console's link.
func TestGetRunTrace(t *testing.T) {
	for _, tmpl := range []string{"", "https://jaeger.example/trace/{trace_id}?uiEmbed=v0"} {
		s := newStackWith(t, stackOptions{TraceURL: tmpl})
		id := s.start(reviewTOML, "")
		s.waiting(id)
		var got struct {
			TraceID  string  `json:"trace_id"`
			TraceURL *string `json:"trace_url"`
		}
		s.as("vera", "GET", "/v1/runs/"+id, "").JSON(t, &got)
		want := telemetry.TraceID(id).String()
		if got.TraceID != want {
			t.Errorf("trace_id %q, want %s", got.TraceID, want)
		}
		switch {
		case tmpl == "" && got.TraceURL != nil:
			t.Errorf("no trace_url configured, yet trace_url %q", *got.TraceURL)
		case tmpl != "" && (got.TraceURL == nil || *got.TraceURL != "https://jaeger.example/trace/"+want+"?uiEmbed=v0"):
			t.Errorf("trace_url %v, want the template with %s", got.TraceURL, want)
		}
	}
}

// TestGetRun: GET /v1/runs/{id} is the run result plus its trace, its workflow's name and its
// graph; an unknown run is 404 naming it.
func TestGetRun(t *testing.T) {
	s := newStack(t)
	id := s.start(reviewTOML, "")
	s.waiting(id)
	for _, name := range []string{"vera", "sam", "alice", "admin"} {
		a := s.as(name, "GET", "/v1/runs/"+id, "")
		if a.Status != http.StatusOK {
			t.Fatalf("as %s: %d %s", name, a.Status, a.Body)
		}
	}
	var got struct {
		protocol.Result
		Trace    []protocol.Event `json:"trace"`
		Workflow string           `json:"workflow"`
		Graph    struct {
			Start string `json:"start"`
			Nodes []struct {
				Step string `json:"step"`
			} `json:"nodes"`
		} `json:"graph"`
	}
	s.as("vera", "GET", "/v1/runs/"+id, "").JSON(t, &got)
	if got.RunID != id || got.Status != protocol.RunWaiting || got.Workflow != "review" {
		t.Errorf("run %s %s of %q, want %s waiting of review", got.RunID, got.Status, got.Workflow, id)
	}
	if len(got.Waiting) != 1 || got.Waiting[0].Step != "ask" || got.Waiting[0].Prompt != "Ship it?" {
		t.Errorf("waiting %+v, want step ask with its prompt", got.Waiting)
	}
	if len(got.Trace) == 0 || got.Trace[0].Type != protocol.EvStart {
		t.Errorf("trace %+v, want the events from the start", got.Trace)
	}
	if got.Graph.Start == "" || len(got.Graph.Nodes) != 1 || got.Graph.Nodes[0].Step != "ask" {
		t.Errorf("graph %+v, want the node of step ask", got.Graph)
	}
	for _, missing := range []string{"r-nosuchrun", "bad.id"} {
		a := s.as("vera", "GET", "/v1/runs/"+missing, "")
		if p := a.problem(t); a.Status != http.StatusNotFound || !strings.Contains(p.Detail, missing) {
			t.Errorf("GET /v1/runs/%s: %d %q, want 404 naming the run", missing, a.Status, p.Detail)
		}
	}
}

// TestGetIteration: GET /v1/runs/{id}/iterations/{step}/{n} is what the iteration did, from
// the records of its answers; 404 when there is none; ?full=true reads the whole texts.
func TestGetIteration(t *testing.T) {
	s := newStack(t)
	id := s.start(pauseTOML, "")
	s.waiting(id)
	for _, full := range []string{"", "?full=true", "?full=false"} {
		a := s.as("vera", "GET", "/v1/runs/"+id+"/iterations/think/1"+full, "")
		if a.Status != http.StatusOK {
			t.Fatalf("iteration 1%s: %d %s", full, a.Status, a.Body)
		}
		var got struct {
			RunID     string                 `json:"run_id"`
			Step      string                 `json:"step"`
			Iteration int                    `json:"iteration"`
			Parts     []client.IterationPart `json:"parts"`
		}
		a.JSON(t, &got)
		if got.RunID != id || got.Step != "think" || got.Iteration != 1 || len(got.Parts) == 0 {
			t.Fatalf("iteration 1%s: %s", full, a.Body)
		}
		p := got.Parts[0]
		if p.Event.StopReason != "needs_human" || p.Event.Record == nil || p.Event.Record.Proposal == nil || p.Event.Record.Proposal.Kind == "" {
			t.Errorf("iteration 1%s: part %s, want the answer that escalated, with its record's proposal", full, a.Body)
		}
	}
	for _, c := range []struct {
		path   string
		status int
		names  string
	}{
		{"/iterations/think/2", http.StatusNotFound, "iteration 2 of step think"},
		{"/iterations/nostep/1", http.StatusNotFound, "nostep"},
		{"/iterations/think/zero", http.StatusBadRequest, "zero"},
		{"/iterations/think/0", http.StatusBadRequest, "think"},
		{"/iterations/think/1?full=maybe", http.StatusBadRequest, "full"},
	} {
		a := s.as("vera", "GET", "/v1/runs/"+id+c.path, "")
		if p := a.problem(t); a.Status != c.status || !strings.Contains(p.Detail, c.names) {
			t.Errorf("GET %s: %d %q, want %d naming %s", c.path, a.Status, p.Detail, c.status, c.names)
		}
	}
	a := s.as("vera", "GET", "/v1/runs/r-nosuchrun/iterations/think/1", "")
	if p := a.problem(t); a.Status != http.StatusNotFound || !strings.Contains(p.Detail, "r-nosuchrun") {
		t.Errorf("an unknown run's iteration: %d %q, want 404 naming the run", a.Status, p.Detail)
	}
}

// TestCancelRun: POST /v1/runs/{id}/cancel answers 202 and the run ends cancelled; 409 once it
// has finished, 404 for an unknown run; its body is optional, and checked when given.
func TestCancelRun(t *testing.T) {
	s := newStack(t)
	id := s.startAs("sam", sleepTOML, "")
	s.waitFor(id, func(r *client.Record) bool {
		return r.Run.Steps["nap"] != nil && r.Run.Steps["nap"].Status == protocol.StepRunning
	})
	for _, c := range []struct{ body, names string }{
		{`{"reason":"x","why":"y"}`, `"why"`},
		{`{"reason":7}`, "reason"},
		{`{"reason":`, "not JSON"},
		{`[1]`, "array"},
		{`{"reason":"a"} {"reason":"b"}`, "more than one"},
	} {
		a := s.as("sam", "POST", "/v1/runs/"+id+"/cancel", c.body)
		if p := a.problem(t); a.Status != http.StatusBadRequest || !strings.Contains(p.Detail, c.names) {
			t.Errorf("cancel with %s: %d %q, want 400 naming %s", c.body, a.Status, p.Detail, c.names)
		}
	}
	big := `{"reason":"` + strings.Repeat("x", testMaxInput) + `"}`
	if a := s.as("sam", "POST", "/v1/runs/"+id+"/cancel", big); a.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("cancel with a body over the limit: %d %s, want 413", a.Status, a.Body)
	} else {
		a.problem(t)
	}
	a := s.as("sam", "POST", "/v1/runs/"+id+"/cancel", `{"reason":"not needed"}`)
	var got map[string]string
	if a.JSON(t, &got); a.Status != http.StatusAccepted || got["run_id"] != id || got["status"] != "cancelling" {
		t.Fatalf("cancel: %d %s, want 202 cancelling", a.Status, a.Body)
	}
	if rec := s.wait(id); rec.Run.Status != protocol.RunCancelled {
		t.Fatalf("run %s after cancel, want cancelled", rec.Run.Status)
	}
	if a := s.as("admin", "POST", "/v1/runs/"+id+"/cancel", ""); a.Status != http.StatusConflict {
		t.Errorf("cancel a finished run: %d %s, want 409", a.Status, a.Body)
	} else if p := a.problem(t); !strings.Contains(p.Detail, id) {
		t.Errorf("409 %q does not name the run", p.Detail)
	}
	if a := s.as("sam", "POST", "/v1/runs/r-nosuchrun/cancel", ""); a.Status != http.StatusNotFound || !strings.Contains(a.problem(t).Detail, "r-nosuchrun") {
		t.Errorf("cancel an unknown run: %d %s, want 404 naming it", a.Status, a.Body)
	}
}

// TestApproverCancels: an approver the run's workflow names may cancel the run, as itself
// (docs/security.md's roles): the cancel goes on the approver's own subject, and the engine
// records it as the approver's; an approver the workflow does not name may not.
func TestApproverCancels(t *testing.T) {
	s := newStack(t)
	id := s.start(gateTOML, "")
	s.waiting(id)
	// bob is an approver too, but the run's workflow names only alice: he may not cancel it.
	a := s.as("bob", "POST", "/v1/runs/"+id+"/cancel", `{"reason":"mine now"}`)
	if p := a.problem(t); a.Status != http.StatusForbidden || !strings.Contains(p.Detail, "principal bob may not cancel this run: only its submitter (admin), the approvers its workflow names (alice) and admins may") {
		t.Fatalf("bob cancels: %d %q, want 403 naming who may", a.Status, p.Detail)
	}
	s.as("alice", "POST", "/v1/runs/"+id+"/cancel", `{"reason":"not today"}`).want(t, http.StatusAccepted, "alice cancels")
	rec := s.wait(id)
	if rec.Run.Status != protocol.RunCancelled {
		t.Fatalf("run %s after alice's cancel, want cancelled", rec.Run.Status)
	}
	if len(rec.Run.Acts) != 1 || rec.Run.Acts[0].By != "alice" || rec.Run.Acts[0].Type != protocol.EvCancel {
		t.Errorf("acts %+v, want alice's cancel", rec.Run.Acts)
	}
}

// decided is the answer of POST …/approvals/{call}.
type decided struct {
	Decided []api.Decided `json:"decided"`
}

// TestDecide: POST /v1/runs/{id}/approvals/{call} approves or denies as the authenticated
// principal; the engine records who; a step's approvers decide who may (403 naming the
// principal, and the run keeps waiting); 404 when nothing with that id waits, 409 when the run
// waits for nothing or has finished; the body is checked.
func TestDecide(t *testing.T) {
	s := newStack(t)

	t.Run("approve", func(t *testing.T) {
		id := s.start(reviewTOML, "")
		s.waiting(id)
		a := s.as("bob", "POST", "/v1/runs/"+id+"/approvals/ask", `{"decision":"approve","message":"ship it"}`)
		var got decided
		if a.JSON(t, &got); a.Status != http.StatusOK || len(got.Decided) != 1 || got.Decided[0].Step != "ask" {
			t.Fatalf("approve: %d %s, want 200 deciding step ask", a.Status, a.Body)
		}
		// The answer came once the engine took the decision: the run no longer waits for it.
		if rec, err := s.Admin.Get(s.Ctx, id); err != nil {
			t.Fatal(err)
		} else if sr := rec.Run.Steps["ask"]; sr.Status == protocol.StepWaiting {
			t.Fatalf("after the 200, step ask is %+v; want the decision taken", sr)
		}
		rec := s.wait(id)
		if rec.Run.Status != protocol.RunCompleted || rec.Run.Steps["ask"].Label != "approved" {
			t.Fatalf("run %s, step ask labelled %q; want completed, approved", rec.Run.Status, rec.Run.Steps["ask"].Label)
		}
		if by := decisionBy(t, s, id); by != "bob" {
			t.Errorf("the decision's event is by %q, want bob (the authenticated principal)", by)
		}
		if a := s.as("bob", "POST", "/v1/runs/"+id+"/approvals/ask", `{"decision":"approve"}`); a.Status != http.StatusConflict {
			t.Errorf("approve a finished run: %d %s, want 409", a.Status, a.Body)
		}
	})

	t.Run("deny with a message", func(t *testing.T) {
		id := s.start(reviewTOML, "")
		s.waiting(id)
		a := s.as("admin", "POST", "/v1/runs/"+id+"/approvals/ask", `{"decision":"deny","message":"not this week"}`)
		if a.Status != http.StatusOK {
			t.Fatalf("deny: %d %s", a.Status, a.Body)
		}
		rec := s.wait(id)
		if sr := rec.Run.Steps["ask"]; sr.Label != "denied" || string(sr.Output) != `"not this week"` {
			t.Errorf("step ask labelled %q with output %s; want denied, the message", sr.Label, sr.Output)
		}
	})

	t.Run("approvers", func(t *testing.T) {
		id := s.start(gateTOML, "")
		s.waiting(id)
		for _, name := range []string{"bob", "admin"} {
			a := s.as(name, "POST", "/v1/runs/"+id+"/approvals/ask", `{"decision":"approve"}`)
			if p := a.problem(t); a.Status != http.StatusForbidden || !strings.Contains(p.Detail, "principal "+name) {
				t.Errorf("%s approves alice's step: %d %q, want 403 naming %s", name, a.Status, p.Detail, name)
			}
		}
		assertWaiting(t, s, id)
		if a := s.as("alice", "POST", "/v1/runs/"+id+"/approvals/ask", `{"decision":"approve"}`); a.Status != http.StatusOK {
			t.Fatalf("alice approves: %d %s", a.Status, a.Body)
		}
		if rec := s.wait(id); rec.Run.Steps["ask"].Label != "approved" {
			t.Errorf("step ask labelled %q, want approved", rec.Run.Steps["ask"].Label)
		}
	})

	t.Run("approvers by role", func(t *testing.T) {
		// The client cannot tell bob's roles: it sends, the engine refuses, the API says so.
		id := s.start(strings.Replace(gateTOML, `approvers = ["alice"]`, `approvers = ["role:admin"]`, 1), "")
		s.waiting(id)
		a := s.as("bob", "POST", "/v1/runs/"+id+"/approvals/ask", `{"decision":"approve"}`)
		if p := a.problem(t); a.Status != http.StatusForbidden || !strings.Contains(p.Detail, "principal bob") {
			t.Errorf("bob approves a step of role:admin: %d %q, want 403 naming bob", a.Status, p.Detail)
		}
		assertWaiting(t, s, id)
		if a := s.as("admin", "POST", "/v1/runs/"+id+"/approvals/ask", `{"decision":"approve"}`); a.Status != http.StatusOK {
			t.Fatalf("admin approves: %d %s", a.Status, a.Body)
		}
		if rec := s.wait(id); rec.Run.Steps["ask"].Label != "approved" {
			t.Errorf("step ask labelled %q, want approved", rec.Run.Steps["ask"].Label)
		}
	})

	t.Run("a call by its id", func(t *testing.T) {
		id := s.start(draftTOML, "")
		rec := s.waiting(id)
		pending := rec.Run.Steps["act"].Pending
		if len(pending) != 1 {
			t.Fatalf("pending %+v, want one call", pending)
		}
		call := pending[0].CallID
		if a := s.as("alice", "POST", "/v1/runs/"+id+"/approvals/c-nosuch", `{"decision":"approve"}`); a.Status != http.StatusNotFound || !strings.Contains(a.problem(t).Detail, "c-nosuch") {
			t.Errorf("approve an unknown call: %d %s, want 404 naming it", a.Status, a.Body)
		}
		a := s.as("alice", "POST", "/v1/runs/"+id+"/approvals/"+call, `{"decision":"approve"}`)
		var got decided
		if a.JSON(t, &got); a.Status != http.StatusOK || len(got.Decided) != 1 || got.Decided[0] != (api.Decided{Step: "act", CallID: call, Tool: "send"}) {
			t.Fatalf("approve call %s: %d %s", call, a.Status, a.Body)
		}
		if rec := s.wait(id); rec.Run.Status != protocol.RunCompleted {
			t.Fatalf("run %s, want completed", rec.Run.Status)
		}
	})

	t.Run("not waiting", func(t *testing.T) {
		id := s.start(sleepTOML, "")
		s.waitFor(id, func(r *client.Record) bool {
			return r.Run.Steps["nap"] != nil && r.Run.Steps["nap"].Status == protocol.StepRunning
		})
		a := s.as("alice", "POST", "/v1/runs/"+id+"/approvals/nap", `{"decision":"approve"}`)
		if p := a.problem(t); a.Status != http.StatusConflict || !strings.Contains(p.Detail, id) {
			t.Errorf("approve a run that waits for nothing: %d %q, want 409 naming the run", a.Status, p.Detail)
		}
		if a := s.as("alice", "POST", "/v1/runs/r-nosuchrun/approvals/ask", `{"decision":"approve"}`); a.Status != http.StatusNotFound {
			t.Errorf("approve in an unknown run: %d %s, want 404", a.Status, a.Body)
		}
	})

	t.Run("bodies", func(t *testing.T) {
		id := s.start(reviewTOML, "")
		s.waiting(id)
		for _, c := range []struct {
			body   string
			status int
			names  string
		}{
			{``, http.StatusBadRequest, `"decision"`},
			{`{}`, http.StatusBadRequest, `"decision"`},
			{`{"decision":"maybe"}`, http.StatusBadRequest, "maybe"},
			{`{"decision":"approve","by":"alice"}`, http.StatusBadRequest, `"by"`},
			{`{"decision":true}`, http.StatusBadRequest, "decision"},
			{`decision=approve`, http.StatusBadRequest, "not JSON"},
			{`{"decision":"approve","message":"` + strings.Repeat("x", testMaxInput) + `"}`, http.StatusRequestEntityTooLarge, "limit"},
		} {
			a := s.as("alice", "POST", "/v1/runs/"+id+"/approvals/ask", c.body)
			if p := a.problem(t); a.Status != c.status || !strings.Contains(p.Detail, c.names) {
				t.Errorf("body %.40s: %d %q, want %d naming %s", c.body, a.Status, p.Detail, c.status, c.names)
			}
		}
		assertWaiting(t, s, id)
	})
}

// assertWaiting fails the test unless run id still waits.
func assertWaiting(t *testing.T, s *stack, id string) {
	t.Helper()
	rec, err := s.Admin.Get(s.Ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Run.Status != protocol.RunWaiting {
		t.Fatalf("run %s is %s, want still waiting", id, rec.Run.Status)
	}
}

// decisionBy returns who the run's decision event is by, as the engine recorded it.
func decisionBy(t *testing.T, s *stack, id string) string {
	t.Helper()
	evs, err := s.Admin.Events(s.Ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type == protocol.EvDecision {
			return ev.By
		}
	}
	t.Fatalf("run %s has no decision event", id)
	return ""
}

// TestSignal: POST /v1/runs/{id}/signals/{event} sends the event with its data (202); the
// wait_event step completes with it; 409 for a finished run, 404 for an unknown one. The
// admin signals: the run is the admin's (TestSignalRefused tries the others).
func TestSignal(t *testing.T) {
	s := newStack(t)
	id := s.start(holdTOML, "")
	s.waiting(id)
	if a := s.as("admin", "POST", "/v1/runs/"+id+"/signals/go", `{"data":{"n":1},"extra":2}`); a.Status != http.StatusBadRequest || !strings.Contains(a.problem(t).Detail, `"extra"`) {
		t.Errorf("signal with an unknown member: %d %s, want 400 naming it", a.Status, a.Body)
	}
	a := s.as("admin", "POST", "/v1/runs/"+id+"/signals/go", `{"data":{"n":1}}`)
	var got map[string]string
	if a.JSON(t, &got); a.Status != http.StatusAccepted || got["run_id"] != id || got["event"] != "go" {
		t.Fatalf("signal: %d %s, want 202", a.Status, a.Body)
	}
	rec := s.wait(id)
	if rec.Run.Status != protocol.RunCompleted || string(rec.Run.Steps["hold"].Output) != `{"n":1}` {
		t.Fatalf("run %s, step output %s; want completed with the signal's data", rec.Run.Status, rec.Run.Steps["hold"].Output)
	}
	if a := s.as("admin", "POST", "/v1/runs/"+id+"/signals/go", ""); a.Status != http.StatusConflict {
		t.Errorf("signal a finished run: %d %s, want 409", a.Status, a.Body)
	}
	if a := s.as("admin", "POST", "/v1/runs/r-nosuchrun/signals/go", ""); a.Status != http.StatusNotFound {
		t.Errorf("signal an unknown run: %d %s, want 404", a.Status, a.Body)
	}
}

// twoPausesTOML's two agents, in parallel, both wait for a person's answer.
const twoPausesTOML = `name = "two_pauses"

[models.m1]
provider = "scripted"
script = [{ escalate = "first question" }, { text = "first done" }]

[models.m2]
provider = "scripted"
script = [{ escalate = "second question" }, { text = "second done" }]

[[steps]]
id = "both"
type = "parallel"
branches = ["one", "two"]

[[steps]]
id = "one"
type = "agent"
model = "m1"
goal = "Ask."
on_needs_human = "pause"

[[steps]]
id = "two"
type = "agent"
model = "m2"
goal = "Ask."
on_needs_human = "pause"
`

// TestResumeWhichStep: with two steps waiting for input, a resume that names none is 400
// naming both; naming one answers that one.
func TestResumeWhichStep(t *testing.T) {
	s := newStack(t)
	id := s.start(twoPausesTOML, "")
	rec := s.waitFor(id, func(r *client.Record) bool { return len(client.WaitingSteps(nil, r.Run)) == 2 })
	ws := client.WaitingSteps(nil, rec.Run)
	a := s.as("admin", "POST", "/v1/runs/"+id+"/resume", `{"input":"yes"}`)
	if p := a.problem(t); a.Status != http.StatusBadRequest || !strings.Contains(p.Detail, ws[0].Key) || !strings.Contains(p.Detail, ws[1].Key) || !strings.Contains(p.Detail, `"step"`) {
		t.Errorf("resume naming no step: %d %q, want 400 naming %s, %s and the member \"step\"", a.Status, p.Detail, ws[0].Key, ws[1].Key)
	}
	for _, w := range ws {
		a := s.as("admin", "POST", "/v1/runs/"+id+"/resume", fmt.Sprintf(`{"input":"yes","step":%q}`, w.Key))
		var got map[string]string
		if a.JSON(t, &got); a.Status != http.StatusOK || got["step"] != w.Key {
			t.Fatalf("resume %s: %d %s", w.Key, a.Status, a.Body)
		}
		s.waitFor(id, func(r *client.Record) bool { return r.Finished() || r.Run.Steps[w.Key].Status != protocol.StepWaiting })
	}
	if rec := s.wait(id); rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s, want completed", rec.Run.Status)
	}
}

// TestResume: POST /v1/runs/{id}/resume answers the agent waiting for a person (200 naming
// the step), and the run goes on to its end; a run waiting for something else is 404, one
// waiting for nothing 409; the input is required.
func TestResume(t *testing.T) {
	s := newStack(t)
	id := s.start(pauseTOML, "")
	s.waiting(id)
	hold := s.start(holdTOML, "")
	s.waiting(hold)
	sleeper := s.start(sleepTOML, "")
	s.waitFor(sleeper, func(r *client.Record) bool {
		return r.Run.Steps["nap"] != nil && r.Run.Steps["nap"].Status == protocol.StepRunning
	})
	for _, c := range []struct {
		run, body string
		status    int
		names     string
	}{
		{id, `{"step":"think"}`, http.StatusBadRequest, `"input"`},
		{id, `{"input":"x","stp":"think"}`, http.StatusBadRequest, `"stp"`},
		{id, `{"input":"x","step":"other"}`, http.StatusNotFound, "other"},
		{hold, `{"input":"x"}`, http.StatusNotFound, hold},
		{sleeper, `{"input":"x"}`, http.StatusConflict, sleeper},
		{"r-nosuchrun", `{"input":"x"}`, http.StatusNotFound, "r-nosuchrun"},
	} {
		a := s.as("admin", "POST", "/v1/runs/"+c.run+"/resume", c.body)
		if p := a.problem(t); a.Status != c.status || !strings.Contains(p.Detail, c.names) {
			t.Errorf("resume %s with %s: %d %q, want %d naming %s", c.run, c.body, a.Status, p.Detail, c.status, c.names)
		}
	}
	a := s.as("admin", "POST", "/v1/runs/"+id+"/resume", `{"input":"The invoice is right; go on."}`)
	var got map[string]string
	if a.JSON(t, &got); a.Status != http.StatusOK || got["run_id"] != id || got["step"] != "think" {
		t.Fatalf("resume: %d %s, want 200 naming step think", a.Status, a.Body)
	}
	rec := s.wait(id)
	if rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s after resume, want completed: %+v", rec.Run.Status, rec.Run.Error)
	}
	if !strings.Contains(string(rec.Run.Steps["think"].Output), "all clear") {
		t.Errorf("step think's output %s, want the model's answer after the resume", rec.Run.Steps["think"].Output)
	}
}

// TestDecideWhileTheEngineIsDown: a decision's answer waits for the engine at most
// EngineWait; with the engine stopped it answers 202 (sent, not taken) instead of hanging,
// and the engine takes the decision once it is back.
func TestDecideWhileTheEngineIsDown(t *testing.T) {
	s := newStackWith(t, stackOptions{EngineWait: 200 * time.Millisecond})
	id := s.start(reviewTOML, "")
	s.waiting(id)
	s.Host.Stop()
	a := s.as("bob", "POST", "/v1/runs/"+id+"/approvals/ask", `{"decision":"approve"}`)
	var got decided
	if a.JSON(t, &got); a.Status != http.StatusAccepted || len(got.Decided) != 1 || got.Decided[0].Step != "ask" {
		t.Fatalf("approve with the engine down: %d %s, want 202 naming step ask", a.Status, a.Body)
	}
	s.Host = s.startHost()
	if rec := s.wait(id); rec.Run.Status != protocol.RunCompleted || rec.Run.Steps["ask"].Label != "approved" {
		t.Fatalf("run %s, step ask labelled %q; want completed, approved", rec.Run.Status, rec.Run.Steps["ask"].Label)
	}
	if by := decisionBy(t, s, id); by != "bob" {
		t.Errorf("the decision's event is by %q, want bob", by)
	}
}

// TestStartWhileTheEngineIsDown: a start's answer waits for the run's first record at most
// EngineWait: 201 once the engine saved it (the run's routes find it at once), 202 with the
// engine stopped, and the engine starts the run once it is back.
func TestStartWhileTheEngineIsDown(t *testing.T) {
	s := newStackWith(t, stackOptions{EngineWait: 200 * time.Millisecond})
	if a := s.as("sam", "PUT", "/v1/workflows/quick", quickTOML); a.Status != http.StatusCreated {
		t.Fatalf("register: %d %s", a.Status, a.Body)
	}
	var got struct {
		RunID string `json:"run_id"`
	}
	a := s.as("sam", "POST", "/v1/runs", `{"workflow":"quick"}`)
	if a.JSON(t, &got); a.Status != http.StatusCreated {
		t.Fatalf("start: %d %s, want 201", a.Status, a.Body)
	}
	if a := s.as("vera", "GET", "/v1/runs/"+got.RunID, ""); a.Status != http.StatusOK {
		t.Errorf("GET the run right after its 201: %d %s", a.Status, a.Body)
	}
	s.Host.Stop()
	a = s.as("sam", "POST", "/v1/runs", `{"workflow":"quick"}`)
	if a.JSON(t, &got); a.Status != http.StatusAccepted || got.RunID == "" {
		t.Fatalf("start with the engine down: %d %s, want 202", a.Status, a.Body)
	}
	s.Host = s.startHost()
	if rec := s.wait(got.RunID); rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s, want completed", rec.Run.Status)
	}
}
