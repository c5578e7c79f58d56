package client_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// RunWorkflows names the workflow of every kept run, registered or not, with its number of
// runs, its newest one and the names it is registered under; a server without runs has none.
func TestRunWorkflows(t *testing.T) {
	v := newEnv(t)
	got, err := v.Client.RunWorkflows(v.Ctx)
	if err != nil || len(got) != 0 {
		t.Fatalf("no runs: %+v, %v; want none", got, err)
	}
	base := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	n := 0
	v.Client = client.New(client.Config{Conn: (*conn.Conn)(v.Box), Now: func() time.Time {
		n++
		return base.Add(time.Duration(n) * time.Second)
	}})
	a := workflow.New("alpha")
	a.Terminate("end")
	_, as := runtest.Bundles(t, a)
	b := workflow.New("beta")
	b.Approval("ask", "Ship?")
	_, bs := runtest.Bundles(t, b)
	for i := 1; i <= 3; i++ {
		v.Wait(v.Start(as, "", fmt.Sprint("a", i)))
	}
	id := v.Start(bs, "", "b1")
	v.WaitFor(id, func(r *client.Record) bool { return r.Run.Status == protocol.RunWaiting })
	started := func(id string) time.Time {
		rec, err := v.Client.Get(v.Ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Run.StartedAt.UTC()
	}
	// beta is registered, under two names of its own; alpha is not.
	src := []byte("name = \"beta\"\n\n[[steps]]\nid = \"ask\"\ntype = \"approval\"\nprompt = \"Ship?\"\n")
	def, ps := workflow.Parse("beta.toml", src)
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	for _, name := range []string{"ship", "release"} {
		if _, _, err := v.Client.Register(v.Ctx, name, src, def); err != nil {
			t.Fatal(err)
		}
	}
	want := []client.RunWorkflow{
		{Name: "alpha", Runs: 3, LastRunID: "a3", LastStarted: started("a3")},
		{Name: "beta", Runs: 1, LastRunID: "b1", LastStarted: started("b1"), RegisteredAs: []string{"release", "ship"}},
	}
	got, err = v.Client.RunWorkflows(v.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("workflows of runs:\n%+v\nwant:\n%+v", got, want)
	}
}

// A registered version's definition is read once: a second list reads none, and a new version,
// whose definition has another name, is read and shows up under it.
func TestRunWorkflowsReadsAVersionOnce(t *testing.T) {
	v := newEnv(t)
	register := func(defName string) {
		t.Helper()
		src := []byte("name = \"" + defName + "\"\n\n[[steps]]\nid = \"end\"\ntype = \"terminate\"\n")
		def, ps := workflow.Parse("w.toml", src)
		if len(ps) > 0 {
			t.Fatal(ps)
		}
		if _, _, err := v.Client.Register(v.Ctx, "shipping", src, def); err != nil {
			t.Fatal(err)
		}
		a := workflow.New(defName)
		a.Terminate("end")
		_, bs := runtest.Bundles(t, a)
		v.Wait(v.Start(bs, "", "run-of-"+defName))
	}
	list := func() map[string][]string {
		t.Helper()
		got, err := v.Client.RunWorkflows(v.Ctx)
		if err != nil {
			t.Fatal(err)
		}
		as := map[string][]string{}
		for _, w := range got {
			as[w.Name] = w.RegisteredAs
		}
		return as
	}
	register("ship_v1")
	for i := range 2 {
		if as := fmt.Sprint(list()); as != "map[ship_v1:[shipping]]" {
			t.Fatalf("list %d: registered as %s", i+1, as)
		}
	}
	if n := client.DefinitionReads(v.Client); n != 1 {
		t.Errorf("two lists read %d definitions, want 1", n)
	}
	register("ship_v2")
	if as := fmt.Sprint(list()); as != "map[ship_v1:[] ship_v2:[shipping]]" {
		t.Errorf("after version 2: registered as %s", as)
	}
	if n := client.DefinitionReads(v.Client); n != 2 {
		t.Errorf("three lists over two versions read %d definitions, want 2", n)
	}
}
