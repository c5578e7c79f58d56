package natsbox

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// workflowsBucket starts an embedded NATS server with the reins layout and returns its
// workflows bucket: a bucket to watch.
func workflowsBucket(t *testing.T) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	ctx := t.Context()
	box, err := Open(ctx, Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })
	if err := EnsureLayout(ctx, box.JetStream(), Layout{}); err != nil {
		t.Fatal(err)
	}
	kv, err := box.JetStream().KeyValue(ctx, WorkflowsBucket)
	if err != nil {
		t.Fatal(err)
	}
	return box.JetStream(), kv
}

// Entries yields the live keys matching its filter, once each, and ends; a done context is one
// error.
func TestEntries(t *testing.T) {
	ctx := t.Context()
	_, kv := workflowsBucket(t)
	for _, k := range []string{"a.1", "a.2", "a.3", "b.1"} {
		if _, err := kv.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "a.2"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		filter string
		want   []string
	}{
		{"a.>", []string{"a.1", "a.3"}},
		{">", []string{"a.1", "a.3", "b.1"}},
		{"c.>", nil},
	} {
		got := map[string]string{}
		for e, err := range Entries(ctx, kv, tc.filter) {
			if err != nil {
				t.Fatalf("%s: %v", tc.filter, err)
			}
			got[e.Key()] = string(e.Value())
		}
		if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, tc.want) {
			t.Errorf("Entries(%s) = %v, want %v", tc.filter, keys, tc.want)
		}
		for k, v := range got {
			if v != k {
				t.Errorf("Entries(%s): %s = %q, want its own value", tc.filter, k, v)
			}
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	n := 0
	for _, err := range Entries(done, kv, ">") {
		n++
		if !errors.Is(err, context.Canceled) {
			t.Errorf("with a done context: %v, want context.Canceled", err)
		}
	}
	if n != 1 {
		t.Errorf("with a done context: %d yields, want 1 (the error)", n)
	}
}
