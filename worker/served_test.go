package worker

import (
	"slices"
	"testing"

	"github.com/reins-run/reins/internal/natsbox"
)

// servedNow lists the keys of natsbox.ServedBucket.
func servedNow(t *testing.T, e *env) []string {
	t.Helper()
	kv, err := e.js.KeyValue(testCtx(t), natsbox.ServedBucket)
	if err != nil {
		t.Fatal(err)
	}
	lister, err := kv.ListKeys(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// A worker announces its handlers and what it advertises once it is ready, and withdraws them
// when it stops.
func TestServedAnnounced(t *testing.T) {
	e := newEnv(t)
	r := e.startWith(Options{}, map[string]Handler{"review": func(tc TaskContext) error { return nil }}, func(w *Worker) {
		w.Advertise(ServedTool, "orders.read")
		w.Advertise(ServedModel, "mine", "not a key")
	})
	id := r.effects.id
	want := []string{"handler.review." + id, "model.mine." + id, "tool.orders.read." + id}
	if got := servedNow(t, e); !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
	r.stop()
	if got := servedNow(t, e); len(got) != 0 {
		t.Errorf("after the worker stopped: %v", got)
	}
}
