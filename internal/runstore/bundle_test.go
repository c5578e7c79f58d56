package runstore_test

import (
	"cmp"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	_ "github.com/reins-run/reins/internal/natsbox/embed" // natsbox.Open starts embedded servers
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/workflow"
)

// load loads and validates a workflow file.
func load(t *testing.T, path string) *workflow.Definition {
	t.Helper()
	def, ps := workflow.LoadAndValidate(path, workflow.Options{})
	if len(ps) > 0 {
		t.Fatalf("%s: %v", path, ps)
	}
	return def
}

func hashOf(t *testing.T, def *workflow.Definition) string {
	t.Helper()
	h, err := def.Hash()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func abs(t *testing.T, path string) string {
	t.Helper()
	a, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestNewBundles: testdata/parent.toml names child.toml, and nested/middle.toml, which names
// ../child.toml: three bundles, the child's once, each file name as written mapped to its hash.
func TestNewBundles(t *testing.T) {
	parent := load(t, "testdata/parent.toml")
	bs, err := workflow.NewBundles(parent, "")
	if err != nil {
		t.Fatal(err)
	}
	hp := hashOf(t, parent)
	hc := hashOf(t, load(t, "testdata/child.toml"))
	// middle.toml names a file outside its own directory: valid only as parent.toml's part.
	middle, ps := workflow.Load("testdata/nested/middle.toml")
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	hm := hashOf(t, middle)
	if bs.Root != hp {
		t.Errorf("Root %.12s, want the parent's hash %.12s", bs.Root, hp)
	}
	if got, want := slices.Sorted(maps.Keys(bs.All)), slices.Sorted(slices.Values([]string{hp, hc, hm})); !slices.Equal(got, want) {
		t.Fatalf("bundles %v, want parent, child and middle %v", got, want)
	}
	dir, nested := abs(t, "testdata"), abs(t, "testdata/nested")
	for _, tc := range []struct {
		hash, name, dir string
		workflows       map[string]string
	}{
		{hp, "parent", dir, map[string]string{"child.toml": hc, "nested/middle.toml": hm}},
		{hc, "child", dir, nil},
		{hm, "middle", nested, map[string]string{"../child.toml": hc}},
	} {
		b := bs.All[tc.hash]
		if b.Definition.Name != tc.name {
			t.Errorf("bundle %.12s holds %s, want %s", tc.hash, b.Definition.Name, tc.name)
		}
		if b.BaseDir != tc.dir {
			t.Errorf("%s: BaseDir %q, want %q", tc.name, b.BaseDir, tc.dir)
		}
		if !maps.Equal(b.Workflows, tc.workflows) {
			t.Errorf("%s: Workflows %v, want %v", tc.name, b.Workflows, tc.workflows)
		}
		if h := hashOf(t, b.Definition); h != tc.hash {
			t.Errorf("%s is stored under %.12s but hashes to %.12s", tc.name, tc.hash, h)
		}
	}

	// An explicit base directory is where the sub-workflow files are read from.
	moved := t.TempDir()
	if _, err := workflow.NewBundles(parent, moved); err == nil || !strings.Contains(err.Error(), "workflow parent: sub-workflow child.toml: ") {
		t.Errorf("NewBundles with a base directory holding no child.toml: %v", err)
	}
	for _, f := range []string{"child.toml", "nested/middle.toml"} {
		data, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(moved, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(moved, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bs2, err := workflow.NewBundles(parent, moved)
	if err != nil {
		t.Fatal(err)
	}
	if bs2.Root != hp || bs2.All[hp].BaseDir != moved || bs2.All[hm].BaseDir != filepath.Join(moved, "nested") {
		t.Errorf("with base directory %s: root %.12s, parent in %q, middle in %q", moved, bs2.Root, bs2.All[hp].BaseDir, bs2.All[hm].BaseDir)
	}
}

// TestNewBundlesAgentTools: an agent tool's step runs on the workflow AgentDefinition derives,
// bundled under the parent's Agents; a workflow tool's file is a sub-workflow like a call's.
func TestNewBundlesAgentTools(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"main.toml": "name = \"tools\"\n[models.m]\nprovider = \"scripted\"\nscript = [{ text = \"x\" }]\n" +
			"[tools.research]\nagent = \"researcher\"\n[tools.summarize]\nworkflow = \"summary.toml\"\n" +
			"[[steps]]\nid = \"lead\"\ntype = \"agent\"\nmodel = \"m\"\ngoal = \"g\"\ntools = [\"research\", \"summarize\"]\n" +
			"[[steps]]\nid = \"researcher\"\ntype = \"agent\"\nmodel = \"m\"\ngoal = \"g\"\n",
		"summary.toml": "name = \"summary\"\n[[steps]]\nid = \"end\"\ntype = \"terminate\"\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	def := load(t, filepath.Join(dir, "main.toml"))
	bs, err := workflow.NewBundles(def, "")
	if err != nil {
		t.Fatal(err)
	}
	root := bs.All[bs.Root]
	sub, err := def.AgentDefinition("researcher")
	if err != nil {
		t.Fatal(err)
	}
	hs, hsum := hashOf(t, sub), hashOf(t, load(t, filepath.Join(dir, "summary.toml")))
	if !maps.Equal(root.Agents, map[string]string{"researcher": hs}) || !maps.Equal(root.Workflows, map[string]string{"summary.toml": hsum}) {
		t.Fatalf("agents %v, workflows %v; want researcher's workflow %.12s and summary.toml %.12s", root.Agents, root.Workflows, hs, hsum)
	}
	b := bs.All[hs]
	if b == nil || b.Definition.Name != "tools-researcher" || b.BaseDir != root.BaseDir || len(bs.All) != 3 {
		t.Fatalf("bundles %v: want the researcher's in the parent's directory", slices.Collect(maps.Keys(bs.All)))
	}
}

func TestNewBundlesGoDefinition(t *testing.T) {
	b := workflow.New("built")
	b.Task("only", "h")
	def, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	bs, err := workflow.NewBundles(def, "")
	if err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	// A definition with no file takes the working directory of the process that made the
	// bundles.
	if len(bs.All) != 1 || bs.All[bs.Root] == nil || bs.All[bs.Root].BaseDir != wd || bs.All[bs.Root].Workflows != nil {
		t.Errorf("bundles %+v, want one with BaseDir %s", bs.All, wd)
	}
}

func TestNewBundlesErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	callOf := func(name, file string) string {
		return "name = \"" + name + "\"\n\n[[steps]]\nid = \"sub\"\ntype = \"call\"\nworkflow = \"" + file + "\"\n"
	}
	write("broken.toml", "name = \"broken\"\n\n[[steps]]\nid = \"x\"\ntype = \"nope\"\n")
	write("self.toml", callOf("self", "self.toml"))
	for _, tc := range []struct {
		name, file, content, want string
	}{
		{"missing", "a.toml", callOf("a", "gone.toml"), "workflow a: sub-workflow gone.toml: " + filepath.Join(dir, "gone.toml")},
		{"invalid", "b.toml", callOf("b", "broken.toml"), "workflow b: sub-workflow broken.toml: " + filepath.Join(dir, "broken.toml") + ":"},
		{"recursive", "c.toml", callOf("c", "self.toml"), "sub-workflows nested deeper than 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Load, not LoadAndValidate: NewBundles reads the files itself, and must not loop.
			def, ps := workflow.Load(write(tc.file, tc.content))
			if len(ps) > 0 {
				t.Fatal(ps)
			}
			_, err := workflow.NewBundles(def, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewBundles: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	b := &workflow.Bundle{BaseDir: "/srv/flows"}
	for _, tc := range []struct {
		bundle     *workflow.Bundle
		path, want string
	}{
		{b, "cassettes/c.json", "/srv/flows/cassettes/c.json"},
		{b, "../common/c.json", "/srv/common/c.json"},
		{b, "./child.toml", "/srv/flows/child.toml"},
		{b, "/abs/c.json", "/abs/c.json"},
		{b, "", ""},
		{&workflow.Bundle{}, "cassettes/c.json", "cassettes/c.json"},
	} {
		if got := tc.bundle.Resolve(tc.path); got != filepath.FromSlash(tc.want) {
			t.Errorf("workflow.Bundle{BaseDir: %q}.Resolve(%q) = %q, want %q", tc.bundle.BaseDir, tc.path, got, tc.want)
		}
	}
}

// workflowsBucket starts an embedded NATS server with the reins layout and returns its
// workflows bucket.
func workflowsBucket(t *testing.T) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	ctx := t.Context()
	box, err := natsbox.Open(ctx, natsbox.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })
	if err := natsbox.EnsureLayout(ctx, box.JetStream(), natsbox.Layout{}); err != nil {
		t.Fatal(err)
	}
	kv, err := box.JetStream().KeyValue(ctx, natsbox.WorkflowsBucket)
	if err != nil {
		t.Fatal(err)
	}
	return box.JetStream(), kv
}

func TestStore(t *testing.T) {
	ctx := t.Context()
	_, kv := workflowsBucket(t)
	bs, err := workflow.NewBundles(load(t, "testdata/parent.toml"), "")
	if err != nil {
		t.Fatal(err)
	}

	// PutBundles stores every bundle, and leaves one already there as it is.
	squatted := bs.All[bs.Root].Workflows["child.toml"]
	if _, err := kv.Create(ctx, squatted, []byte(`{"definition":{"name":"squatter"}}`)); err != nil {
		t.Fatal(err)
	}
	if err := runstore.PutBundles(ctx, kv, bs); err != nil {
		t.Fatal(err)
	}
	if err := runstore.PutBundles(ctx, kv, bs); err != nil {
		t.Fatalf("a second Put: %v", err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := slices.Sorted(slices.Values(keys)), slices.Sorted(maps.Keys(bs.All)); !slices.Equal(got, want) {
		t.Errorf("keys %v, want %v", got, want)
	}

	// A fresh store reads a bundle back: its definition hashes to its key, normalized.
	s := runstore.NewStore(kv)
	b, err := s.Get(ctx, bs.Root)
	if err != nil {
		t.Fatal(err)
	}
	if b.Definition.Name != "parent" || hashOf(t, b.Definition) != bs.Root || !maps.Equal(b.Workflows, bs.All[bs.Root].Workflows) || b.BaseDir != bs.All[bs.Root].BaseDir {
		t.Errorf("Get(root) = %+v, want the parent's bundle", b)
	}
	// A bundle squatting a hash it does not have was replaced by the real one.
	if sq, err := s.Get(ctx, squatted); err != nil || sq.Definition.Name != "child" {
		t.Errorf("Get(%.12s) = %+v, %v; want the child's bundle in place of the squatter", squatted, sq, err)
	}

	// The store keeps what it read: with the key gone from the bucket, it still answers, and a
	// store that never read it does not.
	if err := kv.Purge(ctx, bs.Root); err != nil {
		t.Fatal(err)
	}
	if again, err := s.Get(ctx, bs.Root); err != nil || again != b {
		t.Errorf("Get after purge: %p, %v; want the kept bundle %p", again, err, b)
	}
	if _, err := runstore.NewStore(kv).Get(ctx, bs.Root); !errors.Is(err, jetstream.ErrKeyNotFound) || !strings.Contains(err.Error(), "workflow "+bs.Root[:12]+": ") {
		t.Errorf("Get of a purged key: %v, want ErrKeyNotFound naming the hash", err)
	}

	// Store.Put stores and keeps: Get then answers without reading the bucket.
	s2 := runstore.NewStore(kv)
	if err := s2.Put(ctx, bs); err != nil {
		t.Fatal(err)
	}
	for h, want := range bs.All {
		if got, err := s2.Get(ctx, h); err != nil || got != want {
			t.Errorf("Get(%.12s) after Put: %p, %v; want the bundle put %p", h, got, err, want)
		}
	}

	// Concurrent readers share one store.
	var wg sync.WaitGroup
	s3 := runstore.NewStore(kv)
	hm := bs.All[bs.Root].Workflows["nested/middle.toml"]
	for range 8 {
		wg.Go(func() {
			if b, err := s3.Get(ctx, hm); err != nil || b.Definition.Name != "middle" {
				t.Errorf("concurrent Get: %v, %v", b, err)
			}
		})
	}
	wg.Wait()
}

func TestStoreMalformed(t *testing.T) {
	ctx := t.Context()
	_, kv := workflowsBucket(t)
	for _, tc := range []struct{ name, value, want string }{
		{"not-json", `{`, "the stored bundle is not valid: unexpected end of JSON input"},
		{"array", `[]`, "the stored bundle is not valid: json: cannot unmarshal array"},
		{"no-def", `{"workflows":{"a.toml":"x"}}`, "the stored bundle has no definition"},
		{"null-def", `{"definition":null}`, "the stored bundle has no definition"},
		{"wrong-type", `{"definition":{"steps":"none"}}`, "the stored bundle is not valid: json: cannot unmarshal string"},
		// Anyone who may store workflows can write any key: a definition under another
		// definition's hash must not run in its place.
		{"another-hash", `{"definition":{"name":"impostor"}}`, "the stored definition does not have the hash it is stored under"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fixed := &workflow.Definition{Name: "fixed-" + tc.name}
			key, err := fixed.Hash()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(ctx, key, []byte(tc.value)); err != nil {
				t.Fatal(err)
			}
			s := runstore.NewStore(kv)
			b, err := s.Get(ctx, key)
			if !errors.Is(err, wire.ErrMalformed) || !strings.HasPrefix(err.Error(), "workflow "+key[:12]+": malformed message: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Get = %+v, %v; want ErrMalformed naming the key and %q", b, err, tc.want)
			}
			// A malformed bundle is not kept: once fixed, it is read.
			if _, err := kv.Put(ctx, key, []byte(`{"definition":{"name":"fixed-`+tc.name+`"}}`)); err != nil {
				t.Fatal(err)
			}
			if b, err := s.Get(ctx, key); err != nil || b.Definition.Name != "fixed-"+tc.name {
				t.Errorf("Get after the fix: %+v, %v", b, err)
			}
		})
	}
}

func TestCheckpointKeysInKV(t *testing.T) {
	ctx := t.Context()
	js, _ := workflowsBucket(t)
	kv, err := js.KeyValue(ctx, natsbox.CheckpointsBucket)
	if err != nil {
		t.Fatal(err)
	}
	// Scopes of awkward runs and steps are keys NATS accepts, and a scope's writes (resumed
	// ones included) are found under SCOPE.> and parsed back; SCOPE.ITERATION.* holds only the
	// writes of the iteration's first task.
	for _, scope := range []string{
		wire.CheckpointScope("r-1", "loop", -1, 1),
		wire.CheckpointScope("r-1/sub/2", "fan", 3, 1),
		wire.CheckpointScope("r.x", "a b.c*>é\x00", 4, 2),
	} {
		var want []wire.CheckpointWrite
		for iter := 1; iter <= 2; iter++ {
			for resume := range 3 {
				for n := range 2 {
					w := wire.CheckpointWrite{Scope: scope, Iteration: iter, Resume: resume, N: n}
					if _, err := kv.Put(ctx, w.Key(), []byte(`{"set":1}`)); err != nil {
						t.Fatalf("put %q: %v", w.Key(), err)
					}
					want = append(want, w)
				}
			}
		}
		if got := kvWrites(t, kv, scope+".>"); !reflect.DeepEqual(got, want) {
			t.Errorf("scope %q: writes %+v, want %+v", scope, got, want)
		}
		first := []wire.CheckpointWrite{{Scope: scope, Iteration: 2, N: 0}, {Scope: scope, Iteration: 2, N: 1}}
		if got := kvWrites(t, kv, scope+".2.*"); !reflect.DeepEqual(got, first) {
			t.Errorf("scope %q: SCOPE.2.* lists %+v, want the first task's writes %+v", scope, got, first)
		}
	}
}

// kvWrites lists the checkpoint writes of the keys matching filter, in fold order.
func kvWrites(t *testing.T, kv jetstream.KeyValue, filter string) []wire.CheckpointWrite {
	t.Helper()
	lister, err := kv.ListKeysFiltered(t.Context(), filter)
	if err != nil {
		t.Fatal(err)
	}
	var got []wire.CheckpointWrite
	for k := range lister.Keys() {
		w, err := wire.ParseCheckpointWrite(k)
		if err != nil || w.Key() != k {
			t.Errorf("ParseCheckpointWrite(%q) = %+v, %v", k, w, err)
		}
		got = append(got, w)
	}
	slices.SortFunc(got, func(a, b wire.CheckpointWrite) int {
		return cmp.Or(cmp.Compare(a.Iteration, b.Iteration), cmp.Compare(a.Resume, b.Resume), cmp.Compare(a.N, b.N))
	})
	return got
}

// Effect keys are keys the effects bucket accepts, whatever the id holds.
func TestEffectKeysInKV(t *testing.T) {
	ctx := t.Context()
	js, _ := workflowsBucket(t)
	kv, err := js.KeyValue(ctx, natsbox.EffectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"r-1/work/1/0", "r-1/sub/2/fan#3/2/7/1\x00refund\x00{\"order\":\"O-1\"}", "", "é.*> \n", strings.Repeat("x", 10000)}
	seen := map[string]string{}
	for _, id := range ids {
		key := wire.EffectKey(id)
		if other, dup := seen[key]; dup {
			t.Fatalf("ids %q and %q share the key %s", other, id, key)
		}
		seen[key] = id
		if _, err := kv.Put(ctx, key, []byte(id)); err != nil {
			t.Fatalf("put the effect of %.40q under %q: %v", id, key, err)
		}
		e, err := kv.Get(ctx, key)
		if err != nil || string(e.Value()) != id {
			t.Fatalf("get %q: %v", key, err)
		}
	}
}
