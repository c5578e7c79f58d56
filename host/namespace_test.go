package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/host"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/natsbox/natsserver"
	"github.com/reins-run/reins/internal/natsbox/serverspec"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/worker"
)

// tenant is an engine and a worker in one namespace, with a client, and the inputs its
// handler was given.
type tenant struct {
	box *natsbox.Box
	c   *client.Client

	mu     sync.Mutex
	inputs []string
}

func (tn *tenant) seen() []string {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return slices.Clone(tn.inputs)
}

// startTenant hosts an engine and a worker on box; the worker's handler "tag" answers
// {"ns": NAMESPACE, "in": INPUT}.
func startTenant(ctx context.Context, t *testing.T, box *natsbox.Box) *tenant {
	t.Helper()
	tn := &tenant{box: box, c: client.New(client.Config{Conn: (*conn.Conn)(box)})}
	ns := box.Names().Namespace()
	h, err := host.Start(ctx, host.Config{Conn: (*conn.Conn)(box), Engine: true, Handlers: map[string]worker.Handler{
		"tag": func(tc worker.TaskContext) error {
			tn.mu.Lock()
			tn.inputs = append(tn.inputs, string(tc.Input()))
			tn.mu.Unlock()
			return tc.Complete(map[string]any{"ns": ns, "in": tc.Input()})
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	return tn
}

// TestNamespacesIsolate: two deployments share one NATS server in namespaces "a" and "b". The
// same run id started in both, with different inputs, completes in each with its own result;
// each namespace's worker was given its own run's task only, each namespace's events are its
// own, and the server holds both namespaces' streams and buckets, and nobody's else.
func TestNamespacesIsolate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := func(token string) (natsbox.Identity, bool) {
		return natsbox.Identity{Name: "root", Roles: []string{natsbox.RoleAdmin}}, token == "tok-admin"
	}
	boxA, err := natsbox.Open(ctx, natsbox.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Authenticate: admin, Namespace: "a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { boxA.Close() })
	boxB, err := natsbox.Open(ctx, natsbox.Options{URL: boxA.ClientURL(), Token: "tok-admin", Namespace: "b"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { boxB.Close() })
	a, b := startTenant(ctx, t, boxA), startTenant(ctx, t, boxB)

	const run = "same-run"
	for _, tc := range []struct {
		tn    *tenant
		input string
	}{{a, `1`}, {b, `2`}} {
		if _, err := tc.tn.c.Start(ctx, oneTask(t, "tag"), json.RawMessage(tc.input), run); err != nil {
			t.Fatalf("start in %s: %v", tc.tn.box.Names(), err)
		}
	}
	for _, tc := range []struct {
		tn          *tenant
		ns, input   string
		output      string
		otherPrefix string
	}{{a, "a", `1`, `{"in":1,"ns":"a"}`, "b."}, {b, "b", `2`, `{"in":2,"ns":"b"}`, "a."}} {
		rec, err := tc.tn.c.Wait(ctx, run)
		if err != nil {
			t.Fatalf("wait in %s: %v", tc.ns, err)
		}
		if rec.Run.Status != protocol.RunCompleted || string(rec.Run.Output) != tc.output {
			t.Errorf("namespace %s: run %s with output %s, want completed with %s", tc.ns, rec.Run.Status, rec.Run.Output, tc.output)
		}
		if got := tc.tn.seen(); !slices.Equal(got, []string{tc.input}) {
			t.Errorf("namespace %s: the worker was given the inputs %v, want only [%s]", tc.ns, got, tc.input)
		}
		evs, err := tc.tn.c.Events(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == protocol.EvStart && string(ev.Input) != tc.input {
				t.Errorf("namespace %s holds a start with input %s, want %s", tc.ns, ev.Input, tc.input)
			}
		}
	}

	var got []string
	for name := range boxA.JetStream().StreamNames(ctx).Name() {
		got = append(got, name)
	}
	var want []string
	for _, n := range []natsbox.Names{boxA.Names(), boxB.Names()} {
		want = append(want, n.Streams()...)
		for _, bucket := range n.Buckets() {
			want = append(want, natsbox.KVStream(bucket))
		}
		want = append(want, "OBJ_"+n.ValuesBucket())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the server's streams:\n%v\nwant both namespaces' and no others:\n%v", got, want)
	}
}

// TestTenantPermissions: a user with only the TenantPermissions of its namespace (what
// docs/deploy.md tells an operator to grant) runs an engine, a worker and a client there, and
// may not publish on another namespace's subjects.
func TestTenantPermissions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	names := map[string]natsbox.Names{}
	for _, ns := range []string{"a", "b"} {
		n, err := natsbox.NewNames(ns)
		if err != nil {
			t.Fatal(err)
		}
		names["tok-"+ns] = n
	}
	srv, err := natsserver.Start(ctx, serverspec.Config{Name: "tenants", StoreDir: t.TempDir(), Host: "127.0.0.1", Port: -1,
		Ready: 10 * time.Second, Logger: slog.New(slog.DiscardHandler),
		Auth: func(token string) (string, *serverspec.Perms, *serverspec.Account, bool) {
			n, ok := names[token]
			if !ok {
				return "", nil, nil, false
			}
			return "tenant-" + n.Namespace(), n.TenantPermissions(), nil, true
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	tenants := map[string]*tenant{}
	for _, ns := range []string{"a", "b"} {
		box, err := natsbox.Open(ctx, natsbox.Options{URL: srv.ClientURL(), Token: "tok-" + ns, Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { box.Close() })
		tenants[ns] = startTenant(ctx, t, box)
	}
	for ns, input := range map[string]string{"a": `1`, "b": `2`} {
		tn := tenants[ns]
		id, err := tn.c.Start(ctx, oneTask(t, "tag"), json.RawMessage(input), "")
		if err != nil {
			t.Fatalf("start in %s: %v", ns, err)
		}
		rec, err := tn.c.Wait(ctx, id)
		if err != nil {
			t.Fatalf("wait in %s: %v", ns, err)
		}
		if want := `{"in":` + input + `,"ns":"` + ns + `"}`; rec.Run.Status != protocol.RunCompleted || string(rec.Run.Output) != want {
			t.Errorf("namespace %s: run %s with output %s, want completed with %s", ns, rec.Run.Status, rec.Run.Output, want)
		}
	}
	// Tenant a may not reach b's events, b's runs, nor the default namespace's: each publish
	// on a connection of its own, whose last error is that publish's.
	for _, subject := range []string{"b.reins.event.11.r-1", "reins.event.11.r-1", "$KV.b_reins_runs.r-1", "$JS.API.STREAM.INFO.b_REINS_EVENTS", "a.reins.event.11.r-1"} {
		nc, err := nats.Connect(srv.ClientURL(), nats.Token("tok-a"))
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish(subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		refused := errors.Is(nc.LastError(), nats.ErrPermissionViolation)
		nc.Close()
		if want := !strings.HasPrefix(subject, "a."); refused != want {
			t.Errorf("tenant a publishing on %s: refused %t, want %t", subject, refused, want)
		}
	}
}
