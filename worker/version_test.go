package worker

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/reins-run/reins/protocol"
)

// TestProtocolVersions: a task of the worker's protocol version, or without the member (the
// tasks written before it, version 1), runs and is answered in the worker's version; a task of
// a newer version is refused for good without running, in one sentence naming both versions.
func TestProtocolVersions(t *testing.T) {
	e := newEnv(t)
	var ran atomic.Int32
	e.start(Options{}, map[string]Handler{"h": func(tc TaskContext) error {
		ran.Add(1)
		return tc.Complete("ok")
	}})
	for _, v := range []int{0, protocol.Version} {
		tk := task("v"+string(rune('0'+v)), "s", "h", 1, 1)
		tk.Protocol = v
		e.publish(tk)
		ev := e.event()
		wantEvent(t, ev, protocol.EvCompleted, tk)
		if ev.Protocol != protocol.Version {
			t.Errorf("the answer to a task of version %d declares protocol %d, want %d", v, ev.Protocol, protocol.Version)
		}
	}
	newer := task("newer", "s", "h", 1, 1)
	newer.Protocol = protocol.Version + 1
	e.publish(newer)
	ev := e.event()
	wantEvent(t, ev, protocol.EvFailed, newer)
	want := fmt.Sprintf("task newer/s/1/1/1 speaks reins protocol version %d, and this worker speaks version %d", protocol.Version+1, protocol.Version)
	if !ev.Permanent || !strings.Contains(ev.Error, want) || ev.Protocol != protocol.Version {
		t.Errorf("answer to a newer task: permanent %v, protocol %d, error %q; want a permanent failure saying %q", ev.Permanent, ev.Protocol, ev.Error, want)
	}
	if how := e.waitSettled(newer.MsgID); how != string(protocol.EvFailed) {
		t.Errorf("settled as %s", how)
	}
	if n := ran.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want 2: a task of a newer version must not run", n)
	}
}
