package client_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/runner"
	"github.com/reins-run/reins/workflow"
)

// TestSignalWho: only the run's submitter, the approvers its workflow names and admins may
// signal it. A client that knows its principal's roles refuses anyone else at once, sending
// nothing; one that does not leaves a role named by the workflow to the engine, which records
// the refusal. A replay of the run takes what the run took.
func TestSignalWho(t *testing.T) {
	v := newEnv(t)
	v.stop()
	roles := map[string][]string{"bob": {"submitter", "approver"}, "mallory": {"submitter", "approver"}, "carol": {"approver", "finance"}}
	eng, err := runner.New(runner.Config{Conn: (*conn.Conn)(v.Box), AckWait: runtest.AckWait, Logger: runtest.Logger(t), Roles: func(p string) []string { return roles[p] }})
	if err != nil {
		t.Fatal(err)
	}
	v.Go(eng.Run, eng.Ready())
	as := func(name string, known bool) *client.Client {
		cfg := client.Config{Conn: (*conn.Conn)(v.Box), Principal: name, May: func(s string) bool { return strings.HasSuffix(s, "."+name) }}
		if known {
			cfg.Roles = roles[name]
		}
		return client.New(cfg)
	}
	wf := workflow.New("held")
	wf.WaitEvent("hold", "go")
	wf.Approval("ok", "Go on?").WithApprovers("role:finance")
	wf.Edge("hold", "ok")
	_, bs := runtest.Bundles(t, wf)
	id, err := as("bob", true).Start(v.Ctx, bs, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	v.WaitFor(id, func(r *client.Record) bool { return r.Run.Status == protocol.RunWaiting })

	err = as("mallory", true).Signal(v.Ctx, id, "go", json.RawMessage(`"mallory's"`))
	if want := "principal mallory may not signal this run: only its submitter (bob), the approvers its workflow names (role:finance) and admins may"; !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), want) {
		t.Fatalf("mallory, roles known: %v; want ErrForbidden: %s", err, want)
	}
	if err := as("mallory", false).Signal(v.Ctx, id, "go", json.RawMessage(`"mallory's"`)); err != nil {
		t.Fatalf("mallory, roles unknown: %v; want it sent for the engine to judge", err)
	}
	rec := v.WaitFor(id, func(r *client.Record) bool { return len(r.Run.Acts) == 1 })
	if a := rec.Run.Acts[0]; a.By != "mallory" || !strings.Contains(a.Refused, "principal mallory may not signal this run") || rec.Run.Steps["hold"].Status != protocol.StepWaiting {
		t.Fatalf("act %+v, hold %s; want mallory's refused, hold waiting", a, rec.Run.Steps["hold"].Status)
	}
	evs, err := v.Client.Events(v.Ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(evs); n != 2 { // the start and mallory's one sent
		t.Fatalf("%d events, want 2: the refusal of the client that knew its roles sent nothing", n)
	}

	if err := as("carol", false).Signal(v.Ctx, id, "go", json.RawMessage(`"carol's"`)); err != nil {
		t.Fatalf("carol, of the named role: %v", err)
	}
	v.WaitFor(id, func(r *client.Record) bool { return r.Run.Steps["hold"].Status == protocol.StepCompleted })
	if _, err := as("carol", false).Decide(v.Ctx, id, "ok", true, "", ""); err != nil {
		t.Fatal(err)
	}
	if rec := v.Wait(id); rec.Run.Status != protocol.RunCompleted || string(rec.Run.Steps["hold"].Output) != `"carol's"` {
		t.Fatalf("run %s, hold's output %s; want completed with carol's signal", rec.Run.Status, rec.Run.Steps["hold"].Output)
	}
	rep, err := v.Client.Replay(v.Ctx, id, nil)
	if err != nil || !rep.Same {
		t.Fatalf("the replay: %v, %+v; want the run's path", err, rep)
	}
}
