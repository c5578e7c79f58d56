package client_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/workflow"
)

// registryFile is a small valid workflow file whose terminate step's message says text.
func registryFile(t *testing.T, text string) ([]byte, *workflow.Definition) {
	t.Helper()
	src := []byte(fmt.Sprintf("name = \"greet\"\n[[steps]]\nid = \"fail\"\ntype = \"fail\"\nmessage = %q\n", text))
	def, ps := workflow.Parse("greet.toml", src)
	if len(ps) == 0 {
		ps = workflow.Validate(def, workflow.Options{OneFile: true})
	}
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	def.Normalize()
	return src, def
}

// TestRegisterVersions: versions count from 1, the same file again is the latest (not a new
// version), every version is kept with its source, and the latest lists by name.
func TestRegisterVersions(t *testing.T) {
	v := runtest.New(t)
	at := time.Date(2026, 11, 27, 17, 0, 0, 0, time.UTC)
	c := client.New(client.Config{Conn: (*conn.Conn)(v.Box), Principal: "sam", Now: func() time.Time { return at }})
	if _, err := c.Workflow(v.Ctx, "greet", 0); !errors.Is(err, client.ErrNoWorkflow) {
		t.Fatalf("Workflow of nothing registered: %v, want ErrNoWorkflow", err)
	}
	src1, def1 := registryFile(t, "one")
	src2, def2 := registryFile(t, "two")
	for i, tc := range []struct {
		src     []byte
		def     *workflow.Definition
		version int
		created bool
	}{{src1, def1, 1, true}, {src1, def1, 1, false}, {src2, def2, 2, true}, {src1, def1, 3, true}, {src1, def1, 3, false}} {
		r, created, err := c.Register(v.Ctx, "greet", tc.src, tc.def)
		if err != nil {
			t.Fatalf("registration %d: %v", i, err)
		}
		h, _ := tc.def.Hash()
		if r.Version != tc.version || created != tc.created || r.Hash != h || r.RegisteredBy != "sam" || !r.RegisteredAt.Equal(at) || r.Name != "greet" {
			t.Errorf("registration %d: %+v created %t; want version %d created %t hash %.12s", i, r, created, tc.version, tc.created, h)
		}
	}
	for n, want := range map[int]string{0: "one", 1: "one", 2: "two", 3: "one"} {
		r, err := c.Workflow(v.Ctx, "greet", n)
		if err != nil || !strings.Contains(r.Source, want) {
			t.Errorf("Workflow(greet, %d) = %+v, %v; want the source of %q", n, r, err, want)
		}
	}
	if _, err := c.Workflow(v.Ctx, "greet", 4); !errors.Is(err, client.ErrNoVersion) {
		t.Errorf("Workflow(greet, 4): %v, want ErrNoVersion", err)
	}
	if _, _, err := c.Register(v.Ctx, "other", src2, def2); err != nil {
		t.Fatal(err)
	}
	all, err := c.Workflows(v.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range all {
		got = append(got, fmt.Sprintf("%s v%d %t", r.Name, r.Version, r.Source == ""))
	}
	if want := []string{"greet v3 true", "other v1 true"}; !slices.Equal(got, want) {
		t.Errorf("Workflows = %v, want %v", got, want)
	}
}

// TestRegisterConcurrently: registrations of different files at once get versions one after
// the other, none lost; of the same file at once, one version, created once.
func TestRegisterConcurrently(t *testing.T) {
	v := runtest.New(t)
	const n = 6
	type result struct {
		version int
		created bool
		err     error
	}
	register := func(name string, same bool) []result {
		results := make([]result, n)
		var wg sync.WaitGroup
		for i := range n {
			text := fmt.Sprint("file ", i)
			if same {
				text = "same"
			}
			src, def := registryFile(t, text)
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := client.New(client.Config{Conn: (*conn.Conn)(v.Box), Principal: "owner"}) // a client each, one principal (who may: access_test.go)
				r, created, err := c.Register(v.Ctx, name, src, def)
				results[i] = result{r.Version, created, err}
			}()
		}
		wg.Wait()
		return results
	}
	var versions []int
	for _, r := range register("many", false) {
		if r.err != nil || !r.created {
			t.Fatalf("a registration: %+v", r)
		}
		versions = append(versions, r.version)
	}
	slices.Sort(versions)
	if want := []int{1, 2, 3, 4, 5, 6}; !slices.Equal(versions, want) {
		t.Errorf("versions of %d different files registered at once: %v, want %v", n, versions, want)
	}
	latest, err := v.Client.Workflow(v.Ctx, "many", 0)
	if err != nil || latest.Version != n {
		t.Errorf("latest: %+v, %v; want version %d", latest, err, n)
	}
	created := 0
	for _, r := range register("one", true) {
		if r.err != nil || r.version != 1 {
			t.Fatalf("a registration of the same file: %+v", r)
		}
		if r.created {
			created++
		}
	}
	if created != 1 {
		t.Errorf("the same file registered %d times at once was created %d times, want once", n, created)
	}
}

// TestRegisteredBundles: a version's bundle is read by its hash; removed from the workflows
// bucket (a submitter may write it), it is made again from the source.
func TestRegisteredBundles(t *testing.T) {
	v := runtest.New(t)
	src, def := registryFile(t, "one")
	r, _, err := v.Client.Register(v.Ctx, "greet", src, def)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := v.Client.Bundles(v.Ctx, r)
	if err != nil || bs.Root != r.Hash || bs.All[r.Hash] == nil {
		t.Fatalf("Bundles: %+v, %v", bs, err)
	}
	if err := v.KV(v.Box.Names().WorkflowsBucket()).Delete(v.Ctx, r.Hash); err != nil {
		t.Fatal(err)
	}
	bs, err = v.Client.Bundles(v.Ctx, r)
	if err != nil || bs.Root != r.Hash {
		t.Fatalf("Bundles once removed: %+v, %v", bs, err)
	}
	r.Source = strings.Replace(r.Source, "one", "changed", 1)
	if err := v.KV(v.Box.Names().WorkflowsBucket()).Delete(v.Ctx, r.Hash); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Client.Bundles(v.Ctx, r); !errors.Is(err, client.ErrChanged) {
		t.Errorf("Bundles of a source that gives another definition: %v, want ErrChanged", err)
	}
}

func TestCheckName(t *testing.T) {
	for name, ok := range map[string]bool{
		"refund": true, "a": true, "0-x_y": true, strings.Repeat("a", 64): true,
		"": false, "-a": false, "_a": false, "Refund": false, "a.b": false, "a b": false, "a/b": false,
		strings.Repeat("a", 65): false, "é": false, "a*": false, "a>": false,
	} {
		err := client.CheckName(name)
		if (err == nil) != ok || err != nil && !errors.Is(err, client.ErrBadName) {
			t.Errorf("CheckName(%q) = %v, want ok %t", name, err, ok)
		}
	}
}

func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"refund", "-a", "a.b", "é", strings.Repeat("z", 65)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if client.CheckName(name) != nil {
			return
		}
		// A name it accepts is one KV key token and one subject token.
		if len(name) == 0 || len(name) > client.MaxNameLen || strings.ContainsAny(name, ".*> /\\") || strings.ToLower(name) != name {
			t.Errorf("CheckName accepted %q", name)
		}
		for _, c := range name {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				t.Errorf("CheckName accepted %q", name)
			}
		}
	})
}

// TestStartOnce: a start with the id of a run whose start was already published is ErrExists
// even before an engine saved the run's record (none runs here): the stream took it for a
// duplicate, and the caller learns that it started nothing.
func TestStartOnce(t *testing.T) {
	v := runtest.New(t)
	bs := runtest.LoopWorkflow(t, 2)
	if _, err := v.Client.Start(v.Ctx, bs, nil, "once"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Client.Start(v.Ctx, bs, nil, "once"); !errors.Is(err, client.ErrExists) {
		t.Errorf("a second start of run once: %v, want ErrExists", err)
	}
}
