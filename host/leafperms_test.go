package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/host"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/natstest"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// leafPrincipals are the users of the leaf node in TestLeafRolePermissions: a principal of
// each role, by name, and "admin", allowed everything.
var leafPrincipals = map[string]string{
	"wanda": natsbox.RoleWorker, "sam": natsbox.RoleSubmitter, "ada": natsbox.RoleApprover,
	"val": natsbox.RoleViewer, "admin": natsbox.RoleAdmin,
}

// TestLeafRolePermissions: on a leaf node (JetStream domain "leaf") whose users have exactly
// the permissions of their roles through the hub's domain (API.Permissions of
// Names.Permissions: what docs/deploy.md tells an operator to grant), with the engine on the
// hub, a submitter starts a run whose input is too large for a message, an approver lets it
// go on, a worker serves its task with an output too large for a message (and its
// acknowledgement reaches the hub), and the submitter and a viewer read its result; a viewer may not start a run (one sentence, at once), and
// each principal is refused what its role does not allow.
func TestLeafRolePermissions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	names, err := natsbox.NewNames("acme")
	if err != nil {
		t.Fatal(err)
	}
	api, err := natsbox.NewAPI("hub", "")
	if err != nil {
		t.Fatal(err)
	}
	users := []*server.User{{Username: "admin", Password: "pw-admin"}} // first: the wait connects as it
	for name, role := range leafPrincipals {
		if name == "admin" {
			continue
		}
		p := api.Permissions(names.Permissions(natsbox.Identity{Name: name, Roles: []string{role}}))
		users = append(users, &server.User{Username: name, Password: "pw-" + name, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: p.PublishAllow, Deny: p.PublishDeny},
			Subscribe: &server.SubjectPermission{Allow: p.SubscribeAllow},
		}})
	}
	hub, leaf := natstest.HubAndLeafUsers(t, ctx, "hub", "leaf", users)
	as := func(name string) string { return natstest.UserURL(leaf.ClientURL(), name, "pw-"+name) }

	// The engine is the hub's own, in the namespace.
	engineBox := openLeafBox(ctx, t, natsbox.Options{URL: hub.ClientURL(), Namespace: "acme"})
	eng, err := host.Start(ctx, host.Config{Conn: (*conn.Conn)(engineBox), Engine: true, Logger: failureLog(t),
		Roles: func(p string) []string { return []string{leafPrincipals[p]} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Stop)

	// The worker's acknowledgements of its tasks, as they reach the hub: a core subject that
	// crosses the leaf connection to the hub's consumer, unless the leaf refuses it.
	acked := make(chan struct{}, 1)
	hubConn, err := nats.Connect(hub.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hubConn.Close)
	if _, err := hubConn.Subscribe("$JS.ACK."+names.TasksStream()+".>", func(m *nats.Msg) {
		if string(m.Data) == "+ACK" {
			select {
			case acked <- struct{}{}:
			default:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := hubConn.Flush(); err != nil {
		t.Fatal(err)
	}

	onLeaf := func(name string) *natsbox.Box {
		return openLeafBox(ctx, t, natsbox.Options{URL: as(name), JSDomain: "hub", Namespace: "acme"})
	}
	big := strings.Repeat("x", 100<<10) // more than a message holds: stored by reference
	wk, err := host.Start(ctx, host.Config{Conn: (*conn.Conn)(onLeaf("wanda")), Logger: failureLog(t), Handlers: map[string]worker.Handler{
		"echo": func(tc worker.TaskContext) error {
			var in string
			if err := json.Unmarshal(tc.Input(), &in); err != nil {
				return tc.FailPermanent(err)
			}
			return tc.Complete(map[string]any{"len": len(in), "echo": in})
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wk.Stop)

	sam, ada, val := leafClient(ctx, t, onLeaf("sam")), leafClient(ctx, t, onLeaf("ada")), leafClient(ctx, t, onLeaf("val"))
	bs := gatedEcho(t)
	input, err := json.Marshal(big)
	if err != nil {
		t.Fatal(err)
	}
	id, err := sam.Start(ctx, bs, input, "")
	if err != nil {
		t.Fatalf("the submitter starts a run: %v", err)
	}
	waiting := false
	for u, err := range val.Watch(ctx, id, client.WatchOptions{Only: client.WatchRecords}) {
		rec := u.Record
		if err != nil {
			t.Fatalf("the viewer watches run %s: %v", id, err)
		}
		if waiting = rec.Run.Status == protocol.RunWaiting; waiting || rec.Run.Status != protocol.RunRunning {
			break
		}
	}
	if !waiting {
		t.Fatalf("run %s did not wait for its approval", id)
	}
	if _, err := val.Start(ctx, bs, json.RawMessage(`"v"`), ""); !errors.Is(err, client.ErrForbidden) ||
		!strings.Contains(err.Error(), "principal val may not start runs: it needs the submitter role") {
		t.Errorf("the viewer starts a run: %v, want refused in one sentence", err)
	}
	if _, err := ada.Decide(ctx, id, "ask", true, "ship it", ""); err != nil {
		t.Fatalf("the approver decides: %v", err)
	}

	want := map[string]any{"len": float64(len(big)), "echo": big}
	for who, c := range map[string]*client.Client{"submitter": sam, "viewer": val} {
		rec, err := c.Wait(ctx, id)
		if err != nil {
			t.Fatalf("the %s waits for run %s: %v", who, id, err)
		}
		if err := c.ReadValues(ctx, rec); err != nil {
			t.Fatalf("the %s reads the values of run %s: %v", who, id, err)
		}
		var got map[string]any
		if err := json.Unmarshal(rec.Run.Output, &got); err != nil || rec.Run.Status != protocol.RunCompleted ||
			got["len"] != want["len"] || got["echo"] != want["echo"] {
			t.Errorf("the %s reads run %s: %s with an output of %d bytes (%v), want completed with the echo of %d bytes",
				who, id, rec.Run.Status, len(rec.Run.Output), err, len(big))
		}
	}
	if recs, err := val.List(ctx, ""); err != nil || len(recs) != 1 {
		t.Errorf("the viewer lists runs: %d, %v; want 1", len(recs), err)
	}
	select {
	case <-acked:
	case <-ctx.Done():
		t.Error("the worker's acknowledgement of its task never reached the hub: JetStream would deliver the task again")
	}

	// What each role does not allow is refused on the leaf; what it allows is not (a request
	// that reads, so that nothing is changed).
	runs := names.RunsBucket()
	readRun := api.Subject("DIRECT.GET." + natsbox.KVStream(runs) + "." + natsbox.KVSubject(runs, id))
	event, err := names.EventSubject(id)
	if err != nil {
		t.Fatal(err)
	}
	task, err := names.TaskSubject("echo")
	if err != nil {
		t.Fatal(err)
	}
	start := func(who string) string {
		s, err := names.PrincipalSubject(id, natsbox.SubmitKind, who)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	local, err := natsbox.NewAPI("", "") // the leaf's own JetStream
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		who, what, subject string
		refused            bool
	}{
		{"wanda", "read a run record", readRun, true},
		{"wanda", "write a run record", api.KVPut(runs, id), true},
		{"wanda", "publish a task", task, true},
		{"wanda", "start a run", start("wanda"), true},
		{"wanda", "reach the leaf's own JetStream", local.Subject("INFO"), true},
		{"wanda", "read the tasks stream's info", api.Subject("STREAM.INFO." + names.TasksStream()), false},
		{"val", "start a run", start("val"), true},
		{"val", "answer a task", event, true},
		{"val", "write a workflow", api.KVPut(names.WorkflowsBucket(), "w"), true},
		{"val", "read a run record", readRun, false},
		{"sam", "start a run as another", start("ada"), true},
		{"sam", "answer a task", event, true},
		{"sam", "write a run record", api.KVPut(runs, id), true},
		{"ada", "start a run", start("ada"), true},
		{"ada", "read a run record", readRun, false},
		{"admin", "reach the leaf's own JetStream", local.Subject("INFO"), false},
	} {
		if got := publishRefused(t, as(tc.who), tc.subject); got != tc.refused {
			t.Errorf("%s (%s) may %s (%s): refused %t, want %t", tc.who, leafPrincipals[tc.who], tc.what, tc.subject, got, tc.refused)
		}
	}
}

// openLeafBox opens a Box with opts until the test ends.
func openLeafBox(ctx context.Context, t *testing.T, opts natsbox.Options) *natsbox.Box {
	t.Helper()
	box, err := natsbox.Open(ctx, opts)
	if err != nil {
		t.Fatalf("open %s: %v", natsbox.RedactURL(opts.URL), err)
	}
	t.Cleanup(func() { box.Close() })
	return box
}

// leafClient is a client acting as the principal box's connection authenticated as, with
// what it may publish: the reins command's newClient on an external server.
func leafClient(ctx context.Context, t *testing.T, box *natsbox.Box) *client.Client {
	t.Helper()
	name, publish, err := box.WhoAmI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return client.New(client.Config{Conn: (*conn.Conn)(box), Principal: name, May: func(subject string) bool {
		return slices.ContainsFunc(publish, func(p string) bool { return natsbox.SubjectMatches(p, subject) })
	}})
}

// gatedEcho is a workflow whose approval step "ask", once approved, lets the task step "work"
// (handler "echo") run on the run's input.
func gatedEcho(t *testing.T) *workflow.Bundles {
	t.Helper()
	wf := workflow.New("gated")
	wf.Approval("ask", "Ship?")
	wf.Task("work", "echo").WithInput("input")
	wf.Edge("ask", "work").When("approved")
	def, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	bs, err := workflow.NewBundles(def, "")
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

// publishRefused publishes on subject on a connection of its own at url, and reports whether
// the server refused it: the connection's last error is that publish's.
func publishRefused(t *testing.T, url, subject string) bool {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish(subject, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return errors.Is(nc.LastError(), nats.ErrPermissionViolation)
}

// TestLeafTenantPermissions: a tenant's user on a leaf node with exactly the TenantPermissions
// of its namespace through the hub's domain (docs/deploy.md) runs an engine, a worker and a
// client there: a run completes in the hub's JetStream. The same list without the domain
// (the one of an account's own JetStream) reaches nothing of the hub.
func TestLeafTenantPermissions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	names, err := natsbox.NewNames("acme")
	if err != nil {
		t.Fatal(err)
	}
	api, err := natsbox.NewAPI("hub", "")
	if err != nil {
		t.Fatal(err)
	}
	user := func(name string, p *natsbox.Perms) *server.User {
		return &server.User{Username: name, Password: "pw-" + name, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: p.PublishAllow, Deny: p.PublishDeny},
			Subscribe: &server.SubjectPermission{Allow: p.SubscribeAllow},
		}}
	}
	_, leaf := natstest.HubAndLeafUsers(t, ctx, "hub", "leaf", []*server.User{
		{Username: "admin", Password: "pw-admin"},
		user("tenant", api.Permissions(names.TenantPermissions())),
		user("unmapped", names.TenantPermissions()),
	})
	box := openLeafBox(ctx, t, natsbox.Options{URL: natstest.UserURL(leaf.ClientURL(), "tenant", "pw-tenant"), JSDomain: "hub", Namespace: "acme"})
	tn := startTenant(ctx, t, box)
	id, err := tn.c.Start(ctx, oneTask(t, "tag"), json.RawMessage(`7`), "")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := tn.c.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"in":7,"ns":"acme"}`; rec.Run.Status != protocol.RunCompleted || string(rec.Run.Output) != want {
		t.Errorf("run %s with output %s, want completed with %s", rec.Run.Status, rec.Run.Output, want)
	}
	if !publishRefused(t, natstest.UserURL(leaf.ClientURL(), "unmapped", "pw-unmapped"), api.Subject("INFO")) {
		t.Errorf("a tenant with the list of its own account's JetStream reached the hub's (%s)", api.Subject("INFO"))
	}
}
