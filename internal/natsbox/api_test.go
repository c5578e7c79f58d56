package natsbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/testkit/natstest"
)

// NewAPI accepts a domain of one token or a prefix without wildcards, not both, and addresses
// the API requests and KV writes through it.
func TestNewAPI(t *testing.T) {
	for _, tc := range []struct {
		name, domain, prefix string
		wantErr              string // "" for none
		subject, kvPut       string // of STREAM.MSG.GET.S, and of key k of bucket b
	}{
		{name: "default", subject: "$JS.API.STREAM.MSG.GET.S", kvPut: "$KV.b.k"},
		{name: "domain", domain: "hub", subject: "$JS.hub.API.STREAM.MSG.GET.S", kvPut: "$JS.hub.API.$KV.b.k"},
		{name: "prefix", prefix: "JS.acme.API", subject: "JS.acme.API.STREAM.MSG.GET.S", kvPut: "JS.acme.API.$KV.b.k"},
		{name: "prefix with a final dot", prefix: "fromA.", subject: "fromA.STREAM.MSG.GET.S", kvPut: "fromA.$KV.b.k"},
		{name: "the default prefix written out", prefix: "$JS.API", subject: "$JS.API.STREAM.MSG.GET.S", kvPut: "$KV.b.k"},
		{name: "both", domain: "hub", prefix: "JS.acme.API", wantErr: "are exclusive"},
		{name: "domain of two tokens", domain: "hub.east", wantErr: `JetStream domain "hub.east" is not one subject token`},
		{name: "domain wildcard", domain: "*", wantErr: "is not one subject token"},
		{name: "domain with a space", domain: "a b", wantErr: "is not one subject token"},
		{name: "prefix wildcard", prefix: "JS.*.API", wantErr: `API prefix "JS.*.API" is not a subject without wildcards`},
		{name: "prefix full wildcard", prefix: "JS.>", wantErr: "is not a subject without wildcards"},
		{name: "prefix empty token", prefix: "JS..API", wantErr: "its token 2 is empty"},
		{name: "prefix only a dot", prefix: ".", wantErr: "its token 1 is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewAPI(tc.domain, tc.prefix)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("NewAPI(%q, %q) = %v, want one line with %q", tc.domain, tc.prefix, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewAPI(%q, %q): %v", tc.domain, tc.prefix, err)
			}
			if got := a.Subject("STREAM.MSG.GET.S"); got != tc.subject {
				t.Errorf("Subject = %q, want %q", got, tc.subject)
			}
			if got := a.KVPut("b", "k"); got != tc.kvPut {
				t.Errorf("KVPut = %q, want %q", got, tc.kvPut)
			}
			if a.Domain() != tc.domain {
				t.Errorf("Domain = %q, want %q", a.Domain(), tc.domain)
			}
			// A JetStream context made for the API has the same API (making one sends nothing,
			// so a connection never opened will do).
			js, err := a.jetStream(&nats.Conn{})
			if err != nil {
				t.Fatal(err)
			}
			if got := APIOf(js); got != a {
				t.Errorf("APIOf(the context of %+v) = %+v", a, got)
			}
		})
	}
}

// Open refuses a bad domain or prefix, and any of them for the embedded server, before it
// starts or dials anything.
func TestOpenRefusesJS(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"embedded domain", Options{DataDir: t.TempDir(), JSDomain: "hub"}, "apply to an external server only"},
		{"embedded prefix", Options{DataDir: t.TempDir(), JSAPIPrefix: "JS.acme.API"}, "apply to an external server only"},
		{"both", Options{URL: "nats://127.0.0.1:1", JSDomain: "hub", JSAPIPrefix: "JS.acme.API"}, "are exclusive"},
		{"bad domain", Options{URL: "nats://127.0.0.1:1", JSDomain: "a.b"}, "not one subject token"},
		{"bad prefix", Options{URL: "nats://127.0.0.1:1", JSAPIPrefix: "a.>"}, "not a subject without wildcards"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Open(testCtx(t), tc.opts)
			if err == nil {
				b.Close()
				t.Fatalf("Open(%v) succeeded, want %q", tc.opts, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "cannot connect") {
				t.Errorf("Open(%v) = %v, want %q before connecting", tc.opts, err, tc.wantErr)
			}
			if tc.opts.DataDir != "" {
				if _, err := os.Stat(filepath.Join(tc.opts.DataDir, jetStreamStoreDir)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("Open made the store directory of the refused embedded server: %v", err)
				}
			}
		})
	}
}

// TestJSDomain: a Box on a leaf node that runs JetStream domain "leaf", with JSDomain "hub",
// makes its layout in the hub's JetStream, not the leaf's, and its hand-built subjects (the
// KV write of UpdateKV, the leader's message get of MissingFromLeader) reach it; its Connect
// keeps the domain.
func TestJSDomain(t *testing.T) {
	ctx := testCtx(t)
	hub, leaf := natstest.HubAndLeaf(t, ctx, "hub", "leaf")
	b := open(t, Options{URL: leaf.ClientURL(), JSDomain: "hub"})
	if got := b.API().Domain(); got != "hub" {
		t.Fatalf("Box.API().Domain() = %q, want hub", got)
	}
	exerciseAPI(t, b, natstest.JetStream(t, hub.ClientURL()))

	// The leaf's own JetStream holds none of it.
	if _, err := natstest.JetStream(t, leaf.ClientURL()).Stream(ctx, TasksStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("the leaf's own JetStream has %s: %v, want ErrStreamNotFound", TasksStream, err)
	}
	c, err := b.Connect(ctx, "second")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.JetStream().Stream(ctx, TasksStream); err != nil || c.API() != b.API() {
		t.Errorf("Connect: the hub's %s: %v, API %+v; want it, API %+v", TasksStream, err, c.API(), b.API())
	}

	// A domain nobody serves fails Open, naming it.
	if nb, err := Open(ctx, Options{URL: leaf.ClientURL(), JSDomain: "nowhere"}); err == nil {
		nb.Close()
		t.Error("Open in domain nowhere succeeded")
	} else if !strings.Contains(err.Error(), "JetStream is not available at "+leaf.ClientURL()+" (JetStream domain nowhere)") {
		t.Errorf("Open in domain nowhere: %v, want the URL and the domain named", err)
	}
}

// TestJSAPIPrefix: a Box in account I, which imports account A's JetStream API under "fromA"
// (with A's KV subjects under "fromA.$KV" and A's reins subjects, as an operator sets up a
// shared JetStream), makes its layout in A's JetStream, and its hand-built subjects reach it.
func TestJSAPIPrefix(t *testing.T) {
	as := natstest.StartAccounts(t, `
accounts: {
  A: {
    users: [{user: a, password: a}]
    jetstream: enabled
    exports: [{service: "$JS.API.>"}, {service: "$KV.>"}, {service: "reins.>"}]
  }
  I: {
    users: [{user: i, password: i}]
    imports: [
      {service: {account: A, subject: "$JS.API.>"}, to: "fromA.>"}
      {service: {account: A, subject: "$KV.>"}, to: "fromA.$KV.>"}
      {service: {account: A, subject: "reins.>"}}
    ]
  }
}
`)
	b := open(t, Options{URL: as("i:i"), JSAPIPrefix: "fromA"})
	exerciseAPI(t, b, natstest.JetStream(t, as("a:a")))
}

// exerciseAPI makes the layout through b, checks that owner (the JetStream b reaches, through
// its own API) holds it, and that UpdateKV and MissingFromLeader through b read and write it.
func exerciseAPI(t *testing.T, b *Box, owner jetstream.JetStream) {
	t.Helper()
	ctx := testCtx(t)
	if err := EnsureLayout(ctx, b.JetStream(), b.Layout()); err != nil {
		t.Fatalf("EnsureLayout through %+v: %v", b.API(), err)
	}
	want := b.Names().Streams()
	for _, bucket := range b.Names().Buckets() {
		want = append(want, KVStream(bucket))
	}
	for _, name := range want {
		if _, err := owner.Stream(ctx, name); err != nil {
			t.Errorf("the JetStream the Box reaches has no stream %s: %v", name, err)
		}
	}

	kv, err := b.JetStream().KeyValue(ctx, RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(ctx, "r.1", []byte(`{"v":1}`))
	if err != nil {
		t.Fatal(err)
	}
	rev2, err := UpdateKV(ctx, b.JetStream(), RunsBucket, "r.1", []byte(`{"v":2}`), rev)
	if err != nil {
		t.Fatalf("UpdateKV through %+v: %v", b.API(), err)
	}
	if _, err := UpdateKV(ctx, b.JetStream(), RunsBucket, "r.1", []byte(`{"v":3}`), rev); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		t.Errorf("UpdateKV at a stale revision through %+v = %v, want ErrKeyRevisionMismatch", b.API(), err)
	}
	okv, err := owner.KeyValue(ctx, RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := okv.Get(ctx, "r.1"); err != nil || string(e.Value()) != `{"v":2}` {
		t.Errorf("the owner's r.1 = %v, %v; want {\"v\":2}", e, err)
	}
	got, err := MissingFromLeader(ctx, b.JetStream(), RunsBucket, "r.>", func(string) bool { return false })
	if err != nil || string(got["r.1"]) != `{"v":2}` || len(got) != 1 {
		t.Errorf("MissingFromLeader through %+v = %q, %v; want r.1 = {\"v\":2}", b.API(), got, err)
	}
	if got, found, err := LeaderRevision(ctx, b.JetStream(), RunsBucket, "r.1"); err != nil || !found || got != rev2 {
		t.Errorf("LeaderRevision of r.1 through %+v = %d, %v, %v; want %d, found", b.API(), got, found, err, rev2)
	}
	if err := kv.Delete(ctx, "r.1"); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"r.1", "r.never"} {
		if got, found, err := LeaderRevision(ctx, b.JetStream(), RunsBucket, key); err != nil || found {
			t.Errorf("LeaderRevision of %s (deleted or never written) through %+v = %d, %v, %v; want not found", key, b.API(), got, found, err)
		}
	}
}

// TestAPIPermissions: a role's permissions through another API have the JetStream API and KV
// writes behind it, and every other subject (object store writes, acknowledgements, flow
// control, the namespace's, inboxes) as they were; deny lists are rewritten alike; everything
// (nil) stays everything; the default API changes nothing.
func TestAPIPermissions(t *testing.T) {
	in := &Perms{
		PublishAllow: []string{"$JS.API.INFO", "$JS.API.CONSUMER.CREATE.S.>", "$KV.b.>", "$O.v.C.>",
			"$JS.ACK.S.>", "$JS.FC.>", "acme.reins.event.*.*", "$SYS.REQ.USER.INFO", "$KVX.b", "x.$JS.API.INFO"},
		PublishDeny:    []string{"$JS.API.CONSUMER.CREATE.S.reins-engine-00"},
		SubscribeAllow: []string{"_INBOX.>", "acme.reins.cancel.>"},
	}
	keep := []string{"$O.v.C.>", "$JS.ACK.S.>", "$JS.FC.>", "acme.reins.event.*.*", "$SYS.REQ.USER.INFO", "$KVX.b", "x.$JS.API.INFO"}
	for _, tc := range []struct {
		name, domain, prefix string
		allow                []string // the first three of in's, rewritten
		deny                 string
	}{
		{"default", "", "", in.PublishAllow[:3], in.PublishDeny[0]},
		{"domain", "hub", "", []string{"$JS.hub.API.INFO", "$JS.hub.API.CONSUMER.CREATE.S.>", "$JS.hub.API.$KV.b.>"},
			"$JS.hub.API.CONSUMER.CREATE.S.reins-engine-00"},
		{"prefix", "", "fromA", []string{"fromA.INFO", "fromA.CONSUMER.CREATE.S.>", "fromA.$KV.b.>"},
			"fromA.CONSUMER.CREATE.S.reins-engine-00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewAPI(tc.domain, tc.prefix)
			if err != nil {
				t.Fatal(err)
			}
			got := a.Permissions(in)
			if want := append(slices.Clone(tc.allow), keep...); !slices.Equal(got.PublishAllow, want) {
				t.Errorf("publish allow:\n%q\nwant\n%q", got.PublishAllow, want)
			}
			if !slices.Equal(got.PublishDeny, []string{tc.deny}) || !slices.Equal(got.SubscribeAllow, in.SubscribeAllow) {
				t.Errorf("publish deny %q, subscribe %q; want [%q], %q", got.PublishDeny, got.SubscribeAllow, tc.deny, in.SubscribeAllow)
			}
			if a.Permissions(nil) != nil {
				t.Error("Permissions(nil) is not nil: everything became something")
			}
			// What the KV write and request subjects of the API are, the rewritten list allows.
			for _, s := range []string{a.KVPut("b", "k"), a.Subject("INFO")} {
				if !slices.ContainsFunc(got.PublishAllow, func(p string) bool { return SubjectMatches(p, s) }) {
					t.Errorf("%s is not allowed by %q", s, got.PublishAllow)
				}
			}
		})
	}
	if in.PublishAllow[0] != "$JS.API.INFO" || in.PublishDeny[0] != "$JS.API.CONSUMER.CREATE.S.reins-engine-00" {
		t.Errorf("Permissions changed its argument: %+v", in)
	}
}

// TestWhoAmIOnLeaf: on a leaf node, whose hub answers "$SYS.REQ.USER.INFO" too (about the leaf
// node's connection: no user), WhoAmI returns what the leaf says of the client, every time.
// (Taking the first answer, about one in eight was the hub's.)
func TestWhoAmIOnLeaf(t *testing.T) {
	ctx := testCtx(t)
	a, err := NewAPI("hub", "")
	if err != nil {
		t.Fatal(err)
	}
	p := a.Permissions(Names{}.Permissions(Identity{Name: "sam", Roles: []string{RoleSubmitter}}))
	_, leaf := natstest.HubAndLeafUsers(t, ctx, "hub", "leaf", []*server.User{
		{Username: "admin", Password: "a"},
		{Username: "sam", Password: "s", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: p.PublishAllow, Deny: p.PublishDeny},
			Subscribe: &server.SubjectPermission{Allow: p.SubscribeAllow},
		}},
	})
	b := open(t, Options{URL: natstest.UserURL(leaf.ClientURL(), "sam", "s"), JSDomain: "hub"})
	want := slices.Sorted(slices.Values(p.PublishAllow))
	for i := range 50 {
		name, pub, err := b.WhoAmI(ctx)
		if slices.Sort(pub); err != nil || name != "sam" || !slices.Equal(pub, want) {
			t.Fatalf("WhoAmI %d on the leaf = %q, %q, %v; want sam, %q", i, name, pub, err, want)
		}
	}
}

// The permissions of a worker named wanda in namespace acme, on a leaf node whose processes
// use their hub's JetStream (--js-domain hub): what the leaf's operator grants its NATS user.
func ExampleAPI_Permissions() {
	names, _ := NewNames("acme")
	hub, _ := NewAPI("hub", "")
	p := hub.Permissions(names.Permissions(Identity{Name: "wanda", Roles: []string{RoleWorker}}))
	fmt.Println("publish:")
	for _, s := range p.PublishAllow {
		fmt.Println(" ", s)
	}
	fmt.Println("subscribe:", strings.Join(p.SubscribeAllow, " "))
	fmt.Println("publish deny:", len(p.PublishDeny), "subjects, such as", p.PublishDeny[0])
	// Output:
	// publish:
	//   $SYS.REQ.USER.INFO
	//   $JS.hub.API.INFO
	//   $JS.hub.API.STREAM.INFO.*
	//   $JS.FC.>
	//   $JS.hub.API.DIRECT.GET.KV_acme_reins_workflows.>
	//   $JS.hub.API.STREAM.MSG.GET.KV_acme_reins_workflows
	//   $JS.hub.API.DIRECT.GET.OBJ_acme_reins_values.>
	//   $JS.hub.API.STREAM.MSG.GET.OBJ_acme_reins_values
	//   $JS.hub.API.CONSUMER.CREATE.OBJ_acme_reins_values.>
	//   $JS.hub.API.CONSUMER.DELETE.OBJ_acme_reins_values.*
	//   $JS.hub.API.CONSUMER.INFO.OBJ_acme_reins_values.*
	//   acme.reins.event.*.*
	//   $JS.hub.API.CONSUMER.CREATE.acme_REINS_TASKS.>
	//   $JS.hub.API.CONSUMER.INFO.acme_REINS_TASKS.*
	//   $JS.hub.API.CONSUMER.MSG.NEXT.acme_REINS_TASKS.*
	//   $JS.ACK.acme_REINS_TASKS.>
	//   $JS.hub.API.DIRECT.GET.acme_REINS_TASKS.>
	//   $JS.hub.API.STREAM.MSG.GET.acme_REINS_TASKS
	//   $JS.hub.API.$KV.acme_reins_checkpoints.>
	//   $JS.hub.API.$KV.acme_reins_effects.>
	//   $JS.hub.API.$KV.acme_reins_served.>
	//   $JS.hub.API.$KV.acme_reins_sessions.>
	//   $JS.hub.API.$KV.acme_reins_limits.>
	//   $O.acme_reins_values.C.>
	//   $O.acme_reins_values.M.>
	//   $JS.hub.API.DIRECT.GET.KV_acme_reins_checkpoints.>
	//   $JS.hub.API.STREAM.MSG.GET.KV_acme_reins_checkpoints
	//   $JS.hub.API.CONSUMER.CREATE.KV_acme_reins_checkpoints.>
	//   $JS.hub.API.CONSUMER.DELETE.KV_acme_reins_checkpoints.*
	//   $JS.hub.API.CONSUMER.INFO.KV_acme_reins_checkpoints.*
	//   $JS.hub.API.DIRECT.GET.KV_acme_reins_effects.>
	//   $JS.hub.API.STREAM.MSG.GET.KV_acme_reins_effects
	//   $JS.hub.API.CONSUMER.CREATE.KV_acme_reins_effects.>
	//   $JS.hub.API.CONSUMER.DELETE.KV_acme_reins_effects.*
	//   $JS.hub.API.CONSUMER.INFO.KV_acme_reins_effects.*
	//   $JS.hub.API.DIRECT.GET.KV_acme_reins_sessions.>
	//   $JS.hub.API.STREAM.MSG.GET.KV_acme_reins_sessions
	//   $JS.hub.API.CONSUMER.CREATE.KV_acme_reins_sessions.>
	//   $JS.hub.API.CONSUMER.DELETE.KV_acme_reins_sessions.*
	//   $JS.hub.API.CONSUMER.INFO.KV_acme_reins_sessions.*
	//   $JS.hub.API.DIRECT.GET.KV_acme_reins_limits.>
	//   $JS.hub.API.STREAM.MSG.GET.KV_acme_reins_limits
	//   $JS.hub.API.CONSUMER.CREATE.KV_acme_reins_limits.>
	//   $JS.hub.API.CONSUMER.DELETE.KV_acme_reins_limits.*
	//   $JS.hub.API.CONSUMER.INFO.KV_acme_reins_limits.*
	//   acme.reins.delta.>
	// subscribe: _INBOX.> acme.reins.cancel.>
	// publish deny: 69 subjects, such as $JS.hub.API.CONSUMER.DURABLE.CREATE.>
}
