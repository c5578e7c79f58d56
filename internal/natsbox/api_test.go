package natsbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natstest"
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
	if _, err := UpdateKV(ctx, b.JetStream(), RunsBucket, "r.1", []byte(`{"v":2}`), rev); err != nil {
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
}
