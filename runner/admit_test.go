package runner

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/outbox"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// restart replaces the env's engine by one configured by prepare.
func (v *env) restart(prepare func(*Engine)) {
	v.T.Helper()
	v.stop()
	v.eng, v.stop = v.startEngine(prepare)
}

// TestAdmitRefuses: a run the shell's Admit refuses ends failed with its error before any step
// runs: no task is dispatched; a run it admits runs. Admit sees the run's sub-workflows too.
func TestAdmitRefuses(t *testing.T) {
	v := newEnv(t)
	var seen []string
	v.restart(func(e *Engine) {
		e.admit = func(_ context.Context, defs []*workflow.Definition, input json.RawMessage) *protocol.RunError {
			seen = seen[:0]
			for _, d := range defs {
				seen = append(seen, d.Name)
			}
			if strings.Contains(string(input), "refuse") {
				return &protocol.RunError{Code: "E_OPERATOR_ONLY", Message: "models.m.base_url: refused"}
			}
			return nil
		}
	})
	bs := runtest.LoadBundles(t, "testdata/parent.toml")
	id := v.Start(bs, `"refuse"`, "")
	rec := v.Wait(id)
	if rec.Run.Status != protocol.RunFailed || rec.Run.Error == nil || rec.Run.Error.Code != "E_OPERATOR_ONLY" || rec.Run.StartedBy != "admin" {
		t.Fatalf("run %s %+v by %q; want failed E_OPERATOR_ONLY, started by admin", rec.Run.Status, rec.Run.Error, rec.Run.StartedBy)
	}
	if strings.Join(seen, ",") != "parent,child" {
		t.Errorf("Admit saw %v; want the workflow and its sub-workflow", seen)
	}
	if n := v.StreamMsgs(natsbox.TasksStream); n != 1 { // the keeper only
		t.Errorf("%d messages in %s; want no task besides the keeper", n, natsbox.TasksStream)
	}
}

// TestOutputBound: an answer whose output passes MaxOutputBytes fails the step for good with
// stop reason output_too_large; the output is not kept.
func TestOutputBound(t *testing.T) {
	v := newEnv(t)
	v.restart(func(e *Engine) { e.maxOutput = 16 })
	wf := workflow.New("big")
	wf.Task("make", "big.make")
	_, bs := runtest.Bundles(t, wf)
	w := v.Worker("big.make")
	w.Serve(func(tk *protocol.Task) *protocol.Event { return runtest.Completed(tk, `"`+strings.Repeat("x", 32)+`"`) })
	rec := v.Wait(v.Start(bs, "", ""))
	sr := rec.Run.Steps["make"]
	if rec.Run.Status != protocol.RunFailed || sr.StopReason != StopOutputTooLarge || sr.Output != nil || !strings.Contains(sr.Error, "34 bytes, more than the server's max_output_bytes of 16") {
		t.Fatalf("run %s, make: stop %q output %s error %q", rec.Run.Status, sr.StopReason, sr.Output, sr.Error)
	}
}

// TestAnswerProtocolVersion: an answer in a protocol version the engine does not speak fails
// its step for good, naming both versions; its output is not taken. An answer in version 1, or
// without the member, counts.
func TestAnswerProtocolVersion(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version int
		want    protocol.RunStatus
	}{
		{"without the member", 0, protocol.RunCompleted},
		{"version 1", 1, protocol.RunCompleted},
		{"a newer version", 2, protocol.RunFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newEnv(t)
			wf := workflow.New("versions")
			wf.Task("make", "versions.make")
			_, bs := runtest.Bundles(t, wf)
			v.Worker("versions.make").Serve(func(tk *protocol.Task) *protocol.Event {
				ev := runtest.Completed(tk, `"made"`)
				ev.Protocol = tc.version
				return ev
			})
			rec := v.Wait(v.Start(bs, "", ""))
			sr := rec.Run.Steps["make"]
			if rec.Run.Status != tc.want {
				t.Fatalf("run %s, make: stop %q output %s error %q; want %s", rec.Run.Status, sr.StopReason, sr.Output, sr.Error, tc.want)
			}
			if tc.want == protocol.RunFailed && (sr.StopReason != StopProtocolVersion || sr.Output != nil ||
				!strings.Contains(sr.Error, "the worker answered in reins protocol version 2, and this engine speaks version 1")) {
				t.Errorf("make: stop %q output %s error %q; want protocol_version naming both versions", sr.StopReason, sr.Output, sr.Error)
			}
		})
	}
}

// TestForgedSubjects: a person's decision that comes on the subject of workers or of the
// engine, or an event of one kind on a subject of another, is refused; a person's event is by
// the principal of its subject, whatever its message says.
func TestForgedSubjects(t *testing.T) {
	v, obs := newObservedEnv(t)
	id := v.waitingGate()

	forged := &protocol.Event{RunID: id, Nonce: "n1", Type: protocol.EvDecision, Step: "ask", Item: -1, Approve: true, By: "alice", ID: "n1"}
	runSubj, _ := natsbox.EventSubject(id)
	publishOn(t, v, runSubj, forged, "forged-1") // a worker's subject
	if ev := obs.await(t, v.Ctx, refuse, func(ev *protocol.Event) bool { return ev != nil && ev.Nonce == "n1" }); ev == nil {
		t.Fatal("the forged decision was not refused")
	}
	onEngine := *forged
	onEngine.Nonce, onEngine.ID = "n0", "n0"
	v.Publish(&onEngine, "forged-0") // the engine's subject: it makes no decision
	obs.await(t, v.Ctx, refuse, func(ev *protocol.Event) bool { return ev != nil && ev.Nonce == "n0" })
	wrongKind := *forged
	wrongKind.Nonce, wrongKind.ID = "n2", "n2"
	subj, _ := natsbox.PrincipalSubject(id, natsbox.SubmitKind, "sam")
	publishOn(t, v, subj, &wrongKind, "forged-2")
	obs.await(t, v.Ctx, refuse, func(ev *protocol.Event) bool { return ev != nil && ev.Nonce == "n2" })

	// The real one says "alice" in its message, but comes on bob's subject: it is bob's.
	real := *forged
	real.Nonce, real.ID = "n3", "n3"
	subj, _ = natsbox.PrincipalSubject(id, natsbox.HumanKind, "bob")
	publishOn(t, v, subj, &real, "real-1")
	rec := v.Wait(id)
	if d := rec.Run.Steps["ask"].Decisions[""]; d.By != "bob" || !d.Approve {
		t.Fatalf("decision %+v; want bob's", d)
	}
	if len(rec.Run.Acts) != 1 || rec.Run.Acts[0].By != "bob" || rec.Run.Acts[0].ID != "n3" {
		t.Fatalf("acts %+v; want bob's one decision", rec.Run.Acts)
	}
}

// TestOnBehalfOnlyAdmin: an admin may decide on behalf of someone; anyone else's "on behalf"
// is refused, and the client refuses to send it.
func TestOnBehalfOnlyAdmin(t *testing.T) {
	v, obs := newObservedEnv(t)
	id := v.waitingGate()
	ev := &protocol.Event{RunID: id, Nonce: "n1", Type: protocol.EvDecision, Step: "ask", Item: -1, Approve: true, OnBehalfOf: "alice", ID: "n1"}
	subj, _ := natsbox.PrincipalSubject(id, natsbox.HumanKind, "bob")
	publishOn(t, v, subj, ev, "bob-for-alice")
	obs.await(t, v.Ctx, refuse, func(ev *protocol.Event) bool { return ev != nil && ev.Nonce == "n1" })

	notAdmin := client.New(client.Config{Conn: (*conn.Conn)(v.Box), Principal: "bob", May: func(s string) bool { return strings.Contains(s, ".human.bob") }})
	if _, err := notAdmin.Decide(v.Ctx, id, "ask", true, "", "alice"); !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "only an admin") {
		t.Fatalf("bob on behalf of alice: %v", err)
	}
	if _, err := v.Client.Decide(v.Ctx, id, "ask", true, "", "alice"); err != nil {
		t.Fatal(err)
	}
	rec := v.Wait(id)
	if d := rec.Run.Steps["ask"].Decisions[""]; d.By != "admin" || d.OnBehalfOf != "alice" {
		t.Fatalf("decision %+v; want admin on behalf of alice", d)
	}
}

// TestClientForbidden: a client whose principal may not publish a kind of event says so in one
// sentence naming the principal and the role it lacks, without sending anything.
func TestClientForbidden(t *testing.T) {
	v := newEnv(t)
	viewer := client.New(client.Config{Conn: (*conn.Conn)(v.Box), Principal: "val", May: func(string) bool { return false }})
	wf := workflow.New("gate")
	wf.Approval("ask", "Ship?")
	_, bs := runtest.Bundles(t, wf)
	if _, err := viewer.Start(v.Ctx, bs, nil, ""); !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "principal val may not start runs: it needs the submitter role") {
		t.Fatalf("a viewer starts a run: %v", err)
	}
	id := v.Start(bs, "", "")
	v.WaitFor(id, func(r *client.Record) bool { return r.Run.Status == protocol.RunWaiting })
	if _, err := viewer.Decide(v.Ctx, id, "ask", true, "", ""); !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "needs the approver role") {
		t.Fatalf("a viewer decides: %v", err)
	}
}

// waitingGate starts a run of a workflow with one approval step, ask, and returns its id once
// the step waits.
func (v *env) waitingGate() string {
	v.T.Helper()
	wf := workflow.New("gate")
	wf.Approval("ask", "Ship?")
	_, bs := runtest.Bundles(v.T, wf)
	id := v.Start(bs, "", "")
	v.WaitFor(id, func(r *client.Record) bool { return r.Run.Status == protocol.RunWaiting })
	return id
}

// publishOn publishes ev on subject with message id msgID.
func publishOn(t *testing.T, v *env, subject string, ev *protocol.Event, msgID string) {
	t.Helper()
	m, err := outbox.EventMsg(natsbox.Names{}, ev, "")
	if err != nil {
		t.Fatal(err)
	}
	m.Subject = subject
	m.Header.Set("Nats-Msg-Id", msgID)
	if _, err := v.Box.JetStream().PublishMsg(v.Ctx, m); err != nil {
		t.Fatal(err)
	}
}
