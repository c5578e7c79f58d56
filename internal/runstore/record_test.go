package runstore_test

import (
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/protocol"
)

// A status index key reads back as it was written; keys of the older form (STATUS.RUNID) and
// cursors that a page did not give are refused.
func TestStatusKeys(t *testing.T) {
	run := &engine.Run{ID: "parent/step/1", Workflow: "gate", Status: protocol.RunWaiting, StartedAt: time.Unix(0, 42)}
	key := runstore.StatusKey(run)
	if key != "waiting.gate.00000000000000000042.parent/step/1" {
		t.Fatalf("StatusKey: %q", key)
	}
	ik, ok := runstore.ParseStatusKey(key)
	if !ok || ik != (runstore.IndexKey{Status: protocol.RunWaiting, Workflow: "gate", Cursor: "00000000000000000042.parent/step/1", RunID: "parent/step/1"}) {
		t.Errorf("ParseStatusKey(%q): %+v, %v", key, ik, ok)
	}
	if !runstore.CheckCursor(ik.Cursor) {
		t.Errorf("the cursor of a key, %q, is refused", ik.Cursor)
	}
	for _, bad := range []string{"waiting.r-1", "waiting.gate.42.r-1", "waiting.gate.0000000000000000004x.r-1", "waiting.gate.00000000000000000042."} {
		if ik, ok := runstore.ParseStatusKey(bad); ok {
			t.Errorf("ParseStatusKey(%q) = %+v, want refused", bad, ik)
		}
	}
	for _, bad := range []string{"", "junk", "42.r-1", "00000000000000000042", "00000000000000000042."} {
		if runstore.CheckCursor(bad) {
			t.Errorf("CheckCursor(%q) = true", bad)
		}
	}
	if f := runstore.StatusFilter("", "gate"); f != "*.gate.*.*" {
		t.Errorf("StatusFilter: %q", f)
	}
}
