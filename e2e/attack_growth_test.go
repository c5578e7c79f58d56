//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/outbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// The attacks on a run's growth (docs/security.md, finding 7): loops and agents asking for
// more iterations than the operator allows, a flood of signals by an approver the run does not
// name, a run that would never stop taking events, and the read of a run with a long trace.

// growthHold waits for the event done; its one approval names bob alone.
const growthHold = `name = "NAME"

[[steps]]
id = "hold"
type = "wait_event"
event = "done"

[[steps]]
id = "ok"
type = "approval"
prompt = "Ship it?"
approvers = ["bob"]

[[edges]]
from = "hold"
to = "ok"
`

// record reads run id's record as the operator (to look, never to attack).
func (h *hostile) record(ctx context.Context, id string) (*client.Record, int) {
	h.t.Helper()
	_, admin := h.client(ctx, h.admin)
	rec, err := admin.Get(ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	data, err := runstore.EncodeRecord(rec)
	if err != nil {
		h.t.Fatal(err)
	}
	return rec, len(data)
}

// awaitRecord polls run id's record until ok holds, failing the test after a minute.
func (h *hostile) awaitRecord(ctx context.Context, id, what string, ok func(*client.Record) bool) *client.Record {
	h.t.Helper()
	_, admin := h.client(ctx, h.admin)
	deadline := time.Now().Add(time.Minute)
	for {
		rec, err := admin.Get(ctx, id)
		if err == nil && ok(rec) {
			return rec
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("run %s: %s did not happen within a minute (%v)", id, what, err)
		}
		select {
		case <-ctx.Done():
			h.t.Fatal(ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// rawSignals publishes n signals to run id on the subject of principal, with the attacker's
// own program (a raw NATS connection of token, not reins's client): what reaches the engine
// when the API's and the client's checks are walked around. It returns the id of the last.
func (h *hostile) rawSignals(token, principal, id, name string, n int, data string) string {
	h.t.Helper()
	js, err := jetstream.New(h.conn(token))
	if err != nil {
		h.t.Fatal(err)
	}
	subj, err := natsbox.PrincipalSubject(id, natsbox.HumanKind, principal)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var last string
	var acks []jetstream.PubAckFuture
	for i := range n {
		last = fmt.Sprintf("%s-%s-%d", principal, name, i)
		ev := &protocol.Event{RunID: id, Type: protocol.EvSignal, At: time.Now().UTC(), Item: -1, Name: name, Output: json.RawMessage(data), ID: last, Nonce: last}
		m, err := outbox.EventMsg(natsbox.Names{}, ev, "")
		if err != nil {
			h.t.Fatal(err)
		}
		m.Subject = subj
		a, err := js.PublishMsgAsync(m)
		if err != nil {
			h.t.Fatalf("signal %d: %v", i, err)
		}
		acks = append(acks, a)
	}
	for _, a := range acks {
		select {
		case <-a.Ok():
		case err := <-a.Err():
			h.t.Fatalf("a signal was not stored: %v", err)
		case <-ctx.Done():
			h.t.Fatal("the signals were not acknowledged")
		}
	}
	return last
}

// problemOf decodes a problem document.
func problemOf(t *testing.T, body string) api.Problem {
	t.Helper()
	var p struct {
		api.Problem
		Problems []api.FileProblem `json:"problems"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("not a problem document: %s", body)
	}
	return p.Problem
}

// TestAttackGrowthLoopBounds: mallory registers a workflow whose loop edge allows 2 billion
// iterations (past the default cap), and one whose agent asks for more iterations than the
// operator's cap (1000 here): both are refused with E_OVER_LIMIT naming the operator's key and
// its cap. Started past the API (her own client, the bundle stored by hand), the engine refuses
// the run before any step runs.
func TestAttackGrowthLoopBounds(t *testing.T) {
	h := hostileServer(t, "[limits]\nmax_agent_iterations = 1000\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	loop := `name = "spin"
start = "a"

[[steps]]
id = "a"
type = "sleep"
duration = "1ms"

[[steps]]
id = "b"
type = "sleep"
duration = "1ms"

[[edges]]
from = "a"
to = "b"

[[edges]]
from = "b"
to = "a"
max_iterations = 2000000000
`
	agent := `name = "think"

[models.m]
provider = "scripted"
script = [{ text = "hi" }]

[[steps]]
id = "a"
type = "agent"
model = "m"
goal = "Think forever."
budget = { max_iterations = 5000 }
`
	for _, c := range []struct{ name, file, key, want string }{
		{"spin", loop, "edges[1].max_iterations", "the loop edge b → a asks for 2000000000, more than the server's limits.max_loop_iterations of 1000"},
		{"think", agent, "steps[0].budget.max_iterations", "agent step a's budget.max_iterations asks for 5000, more than the server's limits.max_agent_iterations of 1000"},
	} {
		status, _, body := h.do(attackMalloryToken, "PUT", "/v1/workflows/"+c.name, c.file, "Content-Type", "application/toml")
		if status != http.StatusUnprocessableEntity || !strings.Contains(body, `"code":"E_OVER_LIMIT"`) || !strings.Contains(body, `"key":"`+c.key+`"`) || !strings.Contains(body, c.want) {
			t.Errorf("register %s: %d %s\nwant 422 E_OVER_LIMIT at %s: %s", c.name, status, body, c.key, c.want)
		}
		h.healthy()
	}
	// Past the API: mallory's own client stores the bundle and starts it.
	def, ps := workflow.Parse("spin.toml", []byte(loop))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	def.Normalize()
	bs, err := workflow.NewBundles(def, "")
	if err != nil {
		t.Fatal(err)
	}
	_, mc := h.client(ctx, attackMalloryToken)
	id, err := mc.Start(ctx, bs, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	rec := h.awaitRecord(ctx, id, "the end", func(r *client.Record) bool { return r.Finished() })
	if rec.Run.Status != protocol.RunFailed || rec.Run.Error == nil || rec.Run.Error.Code != string(workflow.EOverLimit) ||
		!strings.Contains(rec.Run.Error.Message, "limits.max_loop_iterations of 1000") || len(rec.Run.Path) != 0 {
		t.Fatalf("the run started past the API: %s %+v, path %v; want failed E_OVER_LIMIT before any step", rec.Run.Status, rec.Run.Error, rec.Run.Path)
	}
}

// TestAttackGrowthSignalFlood: mallory, an approver bob's run does not name, floods it with
// signals. Through the API each is 403 in one sentence naming her, and its data is stored
// nowhere; through her own NATS program each reaches the engine and is refused: the run keeps
// the last 16 refusals and nothing else of them, its record stays small, the server answers.
// Bob's own signals are taken up to the server's max_signals_per_run; the next is refused
// with its reason.
func TestAttackGrowthSignalFlood(t *testing.T) {
	h := hostileServer(t, "[limits]\nmax_signals_per_run = 5\n")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h.register(attackBobToken, "bobs", strings.ReplaceAll(growthHold, "NAME", "bobs"))
	id := h.startAs(attackBobToken, "bobs")
	h.awaitRecord(ctx, id, "the wait", func(r *client.Record) bool { return r.Run.Status == protocol.RunWaiting })
	_, before := h.record(ctx, id)

	const secret = "mallory-flood-secret-4b1d9e"
	for range 20 {
		status, _, body := h.do(attackMalloryToken, "POST", "/v1/runs/"+id+"/signals/done", `{"data":"`+secret+`"}`, "Content-Type", "application/json")
		if want := "principal mallory may not signal this run: only its submitter (bob), the approvers its workflow names (bob) and admins may"; status != http.StatusForbidden || !strings.Contains(problemOf(t, body).Detail, want) {
			t.Fatalf("mallory's signal through the API: %d %s; want 403: %s", status, body, want)
		}
	}
	const flood = 2000
	start := time.Now()
	last := h.rawSignals(attackMalloryToken, "mallory", id, "done", flood, `"`+strings.Repeat("x", 400)+`"`)
	h.healthy()
	rec := h.awaitRecord(ctx, id, "the last refusal", func(r *client.Record) bool {
		return len(r.Run.Acts) > 0 && r.Run.Acts[len(r.Run.Acts)-1].ID == last
	})
	took := time.Since(start)
	_, size := h.record(ctx, id)
	if len(rec.Run.Acts) != 16 || rec.Run.SignalIDs != nil || rec.Run.Signals != nil || rec.Run.Status != protocol.RunWaiting || size > before+16*600 {
		t.Fatalf("after %d refused signals: %d acts, signal ids %d, kept %d, status %s, %d bytes (%d before)", flood, len(rec.Run.Acts), len(rec.Run.SignalIDs), len(rec.Run.Signals), rec.Run.Status, size, before)
	}
	if a := rec.Run.Acts[15]; a.By != "mallory" || !strings.HasPrefix(a.Refused, "principal mallory may not signal this run") {
		t.Fatalf("the last act %+v, want mallory's refusal", a)
	}
	t.Logf("%d refused signals of mallory taken in %s (%.2f ms each, published and decided); record %d bytes (%d before)", flood, took.Round(time.Millisecond), float64(took.Microseconds())/1000/flood, size, before)
	h.scan(secret)

	// Bob's own: five taken, the sixth refused through the API, the seventh past it.
	for i := range 5 {
		if status, _, body := h.do(attackBobToken, "POST", "/v1/runs/"+id+"/signals/note", fmt.Sprintf(`{"data":%d}`, i), "Content-Type", "application/json"); status != http.StatusAccepted {
			t.Fatalf("bob's signal %d: %d %s", i+1, status, body)
		}
	}
	h.awaitRecord(ctx, id, "bob's five signals", func(r *client.Record) bool { return len(r.Run.SignalIDs) == 5 })
	status, _, body := h.do(attackBobToken, "POST", "/v1/runs/"+id+"/signals/done", `{"data":6}`, "Content-Type", "application/json")
	if want := "principal bob may not signal this run: it took 5 signals, the most its server allows a run (max_signals_per_run)"; status != http.StatusForbidden || !strings.Contains(problemOf(t, body).Detail, want) {
		t.Fatalf("bob's sixth signal: %d %s; want 403: %s", status, body, want)
	}
	last = h.rawSignals(attackBobToken, "bob", id, "done", 1, `7`)
	rec = h.awaitRecord(ctx, id, "bob's refused signal", func(r *client.Record) bool {
		return len(r.Run.Acts) > 0 && r.Run.Acts[len(r.Run.Acts)-1].ID == last
	})
	if a := rec.Run.Acts[len(rec.Run.Acts)-1]; !strings.Contains(a.Refused, "max_signals_per_run") || rec.Run.Steps["hold"].Status != protocol.StepWaiting {
		t.Fatalf("bob's signal past the limit: %+v, hold %s", a, rec.Run.Steps["hold"].Status)
	}
	h.healthy()
}

// TestAttackGrowthEventsCap: mallory's loop of naps stays within every iteration cap, but the
// server allows a run 30 events (max_events_per_run): the run ends failed with E_MAX_EVENTS at
// its 30th event, naming the limit.
func TestAttackGrowthEventsCap(t *testing.T) {
	h := hostileServer(t, "[limits]\nmax_events_per_run = 30\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h.register(attackMalloryToken, "naps", napLoop("naps", 1000))
	id := h.startAs(attackMalloryToken, "naps")
	rec := h.awaitRecord(ctx, id, "the end", func(r *client.Record) bool { return r.Finished() })
	if rec.Run.Status != protocol.RunFailed || rec.Run.Error == nil || rec.Run.Error.Code != protocol.CodeMaxEvents || rec.Run.Events != 30 ||
		!strings.Contains(rec.Run.Error.Message, "the run took 30 events, the most its server allows a run (max_events_per_run)") {
		t.Fatalf("run %s %+v after %d events; want failed E_MAX_EVENTS at 30", rec.Run.Status, rec.Run.Error, rec.Run.Events)
	}
	var d api.RunDetail
	status, _, body := h.do(attackViewerToken, "GET", "/v1/runs/"+id, "")
	if err := json.Unmarshal([]byte(body), &d); err != nil || status != http.StatusOK || d.Error == nil || d.Error.Code != protocol.CodeMaxEvents {
		t.Fatalf("GET the run: %d %s", status, body)
	}
	h.healthy()
}

// napLoop is a workflow of two short naps in a loop of iterations.
func napLoop(name string, iterations int) string {
	return fmt.Sprintf(`name = %q
start = "a"

[[steps]]
id = "a"
type = "sleep"
duration = "1ms"

[[steps]]
id = "b"
type = "sleep"
duration = "1ms"

[[edges]]
from = "a"
to = "b"

[[edges]]
from = "b"
to = "a"
max_iterations = %d
`, name, iterations)
}

// TestAttackGrowthBigTrace: a run whose trace holds thousands of events (mallory's refused
// signals) reads in milliseconds: GET /v1/runs/{id} answers the first page of 100 events with
// a cursor, and the pages after it hold the rest.
func TestAttackGrowthBigTrace(t *testing.T) {
	h := hostileServer(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h.register(attackBobToken, "bobs", strings.ReplaceAll(growthHold, "NAME", "bobs"))
	id := h.startAs(attackBobToken, "bobs")
	h.awaitRecord(ctx, id, "the wait", func(r *client.Record) bool { return r.Run.Status == protocol.RunWaiting })
	const flood = 5000
	last := h.rawSignals(attackMalloryToken, "mallory", id, "done", flood, `"`+strings.Repeat("y", 400)+`"`)
	h.awaitRecord(ctx, id, "the last refusal", func(r *client.Record) bool {
		return len(r.Run.Acts) > 0 && r.Run.Acts[len(r.Run.Acts)-1].ID == last
	})
	var first time.Duration
	for range 5 { // the best of five: the machine is shared
		start := time.Now()
		status, _, body := h.do(attackViewerToken, "GET", "/v1/runs/"+id, "")
		took := time.Since(start)
		var d api.RunDetail
		if err := json.Unmarshal([]byte(body), &d); err != nil || status != http.StatusOK || len(d.Trace) != 100 || !d.TraceMore || d.TraceNext == "" {
			t.Fatalf("GET the run: %d, %d events, more %v (%v)", status, len(d.Trace), d.TraceMore, err)
		}
		if first == 0 || took < first {
			first = took
		}
	}
	start := time.Now()
	whole, err := api.NewClient(api.ClientConfig{URL: h.base, Token: attackViewerToken}).GetRunTrace(ctx, id)
	all := time.Since(start)
	if err != nil || len(whole.Trace) != flood+1 {
		t.Fatalf("the whole trace: %d events (%v), want %d", len(whole.Trace), err, flood+1)
	}
	// What GET /v1/runs/{id} read before it paged: every event of the run in one answer.
	_, admin := h.client(ctx, h.admin)
	start = time.Now()
	if evs, err := admin.Events(ctx, id); err != nil || len(evs) != flood+1 {
		t.Fatalf("the run's events: %d (%v)", len(evs), err)
	}
	every := time.Since(start)
	t.Logf("GET /v1/runs/%s with %d events: first page %s; the whole trace in pages of 1000: %s; every event in one read (the unpaged answer's read): %s",
		id, flood+1, first.Round(time.Microsecond), all.Round(time.Millisecond), every.Round(time.Millisecond))
	if first > 500*time.Millisecond {
		t.Fatalf("the first page took %s, want milliseconds", first)
	}
}
