package runner

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// listIDs lists the ids of the runs of status.
func listIDs(t testing.TB, v *env, status protocol.RunStatus) []string {
	t.Helper()
	recs, err := v.Client.List(v.Ctx, status)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.Run.ID)
	}
	return ids
}

// Listing by status reads the status index: it finds a run under its saved status only, skips
// a stale key, gets back a key an engine never wrote once an engine starts, and a prune leaves
// nothing of the index behind.
func TestStatusIndex(t *testing.T) {
	v := newEnv(t)
	wf := workflow.New("ask")
	wf.Approval("ask", "Ship?")
	_, waiting := runtest.Bundles(t, wf)
	done := workflow.New("done")
	done.Terminate("end")
	_, finished := runtest.Bundles(t, done)

	w := v.Start(waiting, "", "w1")
	v.WaitFor(w, func(r *client.Record) bool { return r.Run.Status == protocol.RunWaiting })
	v.Wait(v.Start(finished, "", "c1"))
	if got := fmt.Sprint(listIDs(t, v, protocol.RunWaiting), listIDs(t, v, protocol.RunCompleted), listIDs(t, v, protocol.RunRunning)); got != "[w1] [c1] []" {
		t.Fatalf("waiting, completed, running: %s", got)
	}
	// A stale key (an engine died between the index write and the save) is skipped.
	index := v.KV(natsbox.StatusBucket)
	stale := *v.Wait("c1").Run
	stale.Status = protocol.RunWaiting
	if _, err := index.Put(v.Ctx, runstore.StatusKey(&stale), []byte{'1'}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(listIDs(t, v, protocol.RunWaiting)); got != "[w1]" {
		t.Errorf("waiting with a stale key: %s", got)
	}
	// A key no engine wrote (a version without the index) is added when an engine starts, and
	// a key of the form an older version wrote (STATUS.RUNID) is removed; no reader reads it.
	w1, err := v.Client.Get(v.Ctx, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if err := natsbox.PurgeKeys(v.Ctx, v.Box.JetStream(), natsbox.StatusBucket, runstore.StatusKey(w1.Run)); err != nil {
		t.Fatal(err)
	}
	if _, err := index.Put(v.Ctx, "waiting.w1", []byte{'1'}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(listIDs(t, v, protocol.RunWaiting)); got != "[]" {
		t.Errorf("waiting with an old key only: %s", got)
	}
	v.stop()
	v.eng, v.stop = v.startEngine(nil)
	if got := fmt.Sprint(listIDs(t, v, protocol.RunWaiting)); got != "[w1]" {
		t.Errorf("waiting after an engine started: %s", got)
	}
	if _, err := index.Get(v.Ctx, "waiting.w1"); err == nil {
		t.Error("the key of an older version stays in the index after an engine started")
	}
	if err := v.Client.Cancel(v.Ctx, w, ""); err != nil {
		t.Fatal(err)
	}
	v.Wait(w)
	if got := fmt.Sprint(listIDs(t, v, protocol.RunWaiting), listIDs(t, v, protocol.RunCancelled)); got != "[] [w1]" {
		t.Errorf("waiting, cancelled after the cancel: %s", got)
	}
	if _, err := v.Client.Prune(v.Ctx, 0, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n := v.StreamMsgs(natsbox.KVStream(natsbox.StatusBucket)); n != 0 {
		t.Errorf("after the prune the index holds %d keys, want 0", n)
	}
}

// BenchmarkListWaiting lists the 10 waiting runs among 100,000 finished ones: through the
// status index, and by reading every record (what List did before the index); and reads the
// first page of 50 of the finished ones through the index.
func BenchmarkListWaiting(b *testing.B) {
	v := newEnv(b)
	const finished, waitingRuns = 100_000, 10
	js := v.Box.JetStream()
	runs, err := js.KeyValue(v.Ctx, natsbox.RunsBucket)
	if err != nil {
		b.Fatal(err)
	}
	index, err := js.KeyValue(v.Ctx, natsbox.StatusBucket)
	if err != nil {
		b.Fatal(err)
	}
	for i := range finished + waitingRuns {
		status := protocol.RunCompleted
		if i < waitingRuns {
			status = protocol.RunWaiting
		}
		id := "r-" + strconv.Itoa(i)
		rec := fmt.Sprintf(`{"run":{"id":%q,"workflow":"w","hash":"h","status":%q,"input":null,"started_at":"2026-01-01T00:00:00Z","deadline":"2026-01-02T00:00:00Z","executed":1,"steps":{},"edges":[],"path":[]}}`, id, status)
		if _, err := runs.Put(v.Ctx, id, []byte(rec)); err != nil {
			b.Fatal(err)
		}
		started := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		if _, err := index.Put(v.Ctx, runstore.StatusKey(&engine.Run{ID: id, Workflow: "w", Status: status, StartedAt: started}), []byte{'1'}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("index", func(b *testing.B) {
		for b.Loop() {
			if n := len(listIDs(b, v, protocol.RunWaiting)); n != waitingRuns {
				b.Fatalf("%d waiting runs, want %d", n, waitingRuns)
			}
		}
	})
	b.Run("page of 50 finished", func(b *testing.B) {
		for b.Loop() {
			p, err := v.Client.Query(v.Ctx, client.Query{Status: protocol.RunCompleted, Workflow: "w", Limit: 50})
			if err != nil || len(p.Records) != 50 || p.Next == "" {
				b.Fatalf("%d runs, next %q, %v: want a page of 50 and more", len(p.Records), p.Next, err)
			}
		}
	})
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			recs, err := v.Client.List(v.Ctx, "")
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for _, r := range recs {
				if r.Run.Status == protocol.RunWaiting {
					n++
				}
			}
			if n != waitingRuns {
				b.Fatalf("%d waiting runs, want %d", n, waitingRuns)
			}
		}
	})
}
