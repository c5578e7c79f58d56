package client_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/runtest"
)

// as is a client of v's server acting as principal with roles.
func as(v *runtest.Env, principal string, roles ...string) *client.Client {
	return client.New(client.Config{Conn: (*conn.Conn)(v.Box), Principal: principal, Roles: roles})
}

// latestVersion is the latest version of name, and who registered it.
func latestVersion(t *testing.T, v *runtest.Env, name string) string {
	t.Helper()
	r, err := v.Client.Workflow(v.Ctx, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("v%d by %s", r.Version, r.RegisteredBy)
}

// TestOwners: the principal who registers a name first owns it; only the owner, the writers
// it names (principals and roles) and admins add versions; only the owner and admins change
// the writers. A refusal names the principal and the owner, and stores nothing.
func TestOwners(t *testing.T) {
	v := runtest.New(t)
	n := 0
	register := func(c *client.Client) error { // a new file each time: every registration is a version
		n++
		src, def := registryFile(t, fmt.Sprint("file ", n))
		_, _, err := c.Register(v.Ctx, "greet", src, def)
		return err
	}
	sam := as(v, "sam", "submitter")
	if err := register(sam); err != nil {
		t.Fatal(err)
	}
	a, err := v.Client.Access(v.Ctx, "greet")
	if err != nil || a.Owner != "sam" || len(a.Writers) != 0 || a.Name != "greet" {
		t.Fatalf("the access of a new name: %+v, %v", a, err)
	}
	steps := []struct {
		who     *client.Client
		name    string
		writers []string // SetWriters before the registration, when not nil
		setErr  error
		err     error
	}{
		{who: as(v, "mallory", "submitter"), name: "mallory", err: client.ErrNotWriter},
		{who: sam, name: "sam"},
		{who: as(v, "admin"), name: "admin (the data directory's)"},
		{who: as(v, "ada", "admin"), name: "ada (an admin)"},
		{who: as(v, "mallory", "submitter"), name: "mallory naming herself", writers: []string{"mallory"}, setErr: client.ErrNotOwner, err: client.ErrNotWriter},
		{who: sam, name: "sam naming mallory and role:finance", writers: []string{"mallory", "role:finance", "mallory"}},
		{who: as(v, "mallory", "submitter"), name: "mallory, a writer"},
		{who: as(v, "fred", "submitter", "finance"), name: "fred, of role finance"},
		{who: as(v, "zed", "submitter"), name: "zed, of no role named", err: client.ErrNotWriter},
		{who: as(v, "mallory", "submitter"), name: "mallory, a writer, changing the writers", writers: []string{"mallory", "zed"}, setErr: client.ErrNotOwner},
		{who: as(v, "ada", "admin"), name: "an admin changing the writers", writers: []string{}},
		{who: as(v, "mallory", "submitter"), name: "mallory, no longer a writer", err: client.ErrNotWriter},
	}
	for _, st := range steps {
		if st.writers != nil {
			_, err := st.who.SetWriters(v.Ctx, "greet", st.writers)
			if !errors.Is(err, st.setErr) || st.setErr == nil && err != nil {
				t.Fatalf("%s: SetWriters: %v, want %v", st.name, err, st.setErr)
			}
		}
		before := latestVersion(t, v, "greet")
		err := register(st.who)
		switch {
		case st.err == nil && err != nil:
			t.Fatalf("%s: %v", st.name, err)
		case st.err != nil && !errors.Is(err, st.err):
			t.Fatalf("%s: %v, want %v", st.name, err, st.err)
		case st.err != nil:
			if !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "it belongs to sam") || strings.Count(err.Error(), ". ") > 0 {
				t.Errorf("%s: the refusal is not one sentence naming the owner: %v", st.name, err)
			}
			if after := latestVersion(t, v, "greet"); after != before {
				t.Errorf("%s: refused, yet the latest moved from %s to %s", st.name, before, after)
			}
		}
	}
	a, err = v.Client.Access(v.Ctx, "greet")
	if err != nil || a.Owner != "sam" || len(a.Writers) != 0 || a.UpdatedBy != "ada" {
		t.Fatalf("the access at the end: %+v, %v", a, err)
	}
	if _, err := sam.SetWriters(v.Ctx, "nothing", nil); !errors.Is(err, client.ErrNoWorkflow) {
		t.Errorf("SetWriters of a name nothing is registered under: %v", err)
	}
	if _, err := v.Client.Access(v.Ctx, "nothing"); !errors.Is(err, client.ErrNoWorkflow) {
		t.Errorf("Access of a name nothing is registered under: %v", err)
	}
	all, err := v.Client.Accesses(v.Ctx)
	if err != nil || len(all) != 1 || all["greet"].Owner != "sam" {
		t.Errorf("Accesses: %+v, %v", all, err)
	}
}

// TestOwnerOfOldNames: a name registered before access records existed belongs to the
// principal of its version 1; a refused registration stores nothing, not even the derived
// record; the owner's next version stores it.
func TestOwnerOfOldNames(t *testing.T) {
	v := runtest.New(t)
	src1, def1 := registryFile(t, "one")
	src2, def2 := registryFile(t, "two")
	src3, def3 := registryFile(t, "three")
	if _, _, err := as(v, "sam").Register(v.Ctx, "greet", src1, def1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := as(v, "admin").Register(v.Ctx, "greet", src2, def2); err != nil {
		t.Fatal(err)
	}
	kv := v.KV(natsbox.RegistryBucket)
	if err := kv.Purge(v.Ctx, client.AccessKey("greet")); err != nil { // as before access records
		t.Fatal(err)
	}
	a, err := v.Client.Access(v.Ctx, "greet")
	if err != nil || a.Owner != "sam" {
		t.Fatalf("the derived access: %+v, %v", a, err)
	}
	if _, _, err := as(v, "mallory").Register(v.Ctx, "greet", src3, def3); !errors.Is(err, client.ErrNotWriter) {
		t.Fatalf("mallory's version of an old name: %v", err)
	}
	if _, err := kv.Get(v.Ctx, client.AccessKey("greet")); err == nil {
		t.Fatal("a refused registration stored an access record")
	}
	if _, _, err := as(v, "sam").Register(v.Ctx, "greet", src3, def3); err != nil {
		t.Fatal(err)
	}
	if all, err := v.Client.Accesses(v.Ctx); err != nil || all["greet"].Owner != "sam" {
		t.Fatalf("the owner's registration stored no access record: %+v, %v", all, err)
	}
}

// TestOwnerClaimConcurrently: principals registering a new name at once: one owns it, the
// others are refused, and every version is the owner's.
func TestOwnerClaimConcurrently(t *testing.T) {
	v := runtest.New(t)
	const n = 6
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		src, def := registryFile(t, fmt.Sprint("file ", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = as(v, fmt.Sprint("p", i)).Register(v.Ctx, "claimed", src, def)
		}()
	}
	wg.Wait()
	var owners []string
	for i, err := range errs {
		switch {
		case err == nil:
			owners = append(owners, fmt.Sprint("p", i))
		case !errors.Is(err, client.ErrNotWriter):
			t.Fatalf("p%d: %v", i, err)
		}
	}
	a, err := v.Client.Access(v.Ctx, "claimed")
	if err != nil || len(owners) != 1 || a.Owner != owners[0] {
		t.Fatalf("registered: %v; access %+v, %v", owners, a, err)
	}
	if got := latestVersion(t, v, "claimed"); got != "v1 by "+owners[0] {
		t.Errorf("the latest is %s, want v1 by %s", got, owners[0])
	}
}

// TestCheckWriters: writers are principals' names and role:NAME, without duplicates, at most
// MaxWriters; anything else is refused naming the entry.
func TestCheckWriters(t *testing.T) {
	many := make([]string, client.MaxWriters+1)
	for i := range many {
		many[i] = fmt.Sprint("p", i)
	}
	for _, tc := range []struct {
		in   []string
		want []string
		err  string
	}{
		{in: nil, want: []string{}},
		{in: []string{"alice", "role:finance", "alice"}, want: []string{"alice", "role:finance"}},
		{in: many[:client.MaxWriters], want: many[:client.MaxWriters]},
		{in: many, err: "65 writers is not a list of writers: at most 64"},
		{in: []string{"alice", ""}, err: `writer 2, "", is not a list of writers`},
		{in: []string{"role:"}, err: `writer 1, "role:"`},
		{in: []string{"a.b"}, err: `writer 1, "a.b"`},
		{in: []string{"a b"}, err: `writer 1, "a b"`},
		{in: []string{"role:role:x"}, err: `writer 1, "role:role:x"`},
		{in: []string{"x:y"}, err: `writer 1, "x:y"`},
		{in: []string{">"}, err: `writer 1, ">"`},
	} {
		got, err := client.CheckWriters(tc.in)
		switch {
		case tc.err == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("CheckWriters(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, client.ErrBadWriters)):
			t.Errorf("CheckWriters(%q): %v, want an error with %q", tc.in, err, tc.err)
		}
	}
}

// FuzzCheckWriters: what CheckWriters takes has no duplicates, at most MaxWriters entries,
// each a subject token once "role:" is taken off, and is taken again unchanged.
func FuzzCheckWriters(f *testing.F) {
	for _, s := range []string{"alice,role:finance", "a,a", "role:", "a.b", ",", "é,x:y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		in := strings.Split(list, ",")
		got, err := client.CheckWriters(in)
		if err != nil {
			return
		}
		if len(got) > client.MaxWriters {
			t.Fatalf("CheckWriters took %d writers", len(got))
		}
		for i, w := range got {
			if slices.Contains(got[:i], w) || natsbox.CheckToken(strings.TrimPrefix(w, client.RolePrefix)) != nil || strings.Contains(strings.TrimPrefix(w, client.RolePrefix), ":") {
				t.Fatalf("CheckWriters(%q) took %q", in, w)
			}
		}
		again, err := client.CheckWriters(got)
		if err != nil || !slices.Equal(again, got) {
			t.Fatalf("CheckWriters(%q) = %q, then %q, %v", in, got, again, err)
		}
	})
}
