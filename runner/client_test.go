package runner

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

func TestClientStartErrors(t *testing.T) {
	v := newEnv(t)
	bs := loopWorkflow(t, 2)
	if _, err := v.client.Start(v.ctx, bs, json.RawMessage(`{bad`), "r1"); err == nil ||
		!strings.Contains(err.Error(), "the input of run r1 is not JSON") || strings.Count(err.Error(), ". ") > 0 {
		t.Errorf("input that is not JSON: %v", err)
	}
	// One set of rules (wire.CheckJSON): what the engine could not take is refused here; the
	// size bound is the client's (a server's max_input_bytes).
	small := NewClient(ClientConfig{Box: v.box, MaxInputBytes: 512 << 10})
	for _, tc := range []struct{ name, input, want string }{
		{"too deep", strings.Repeat("[", 9999) + strings.Repeat("]", 9999), "the input of run r1 nests deeper than 256 levels"},
		{"not UTF-8", "\"\xff\"", "the input of run r1 is not valid UTF-8 (byte 1)"},
		{"too large", strconv.Quote(strings.Repeat("x", 600<<10)), "more than the 524288 bytes allowed"},
	} {
		if _, err := small.Start(v.ctx, bs, json.RawMessage(tc.input), "r1"); !errors.Is(err, wire.ErrBadInput) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := v.client.Start(v.ctx, bs, nil, "bad id"); err == nil || !strings.Contains(err.Error(), `run id "bad id"`) {
		t.Errorf("bad run id: %v", err)
	}
	if _, err := v.client.Start(v.ctx, nil, nil, ""); err == nil {
		t.Error("no bundles: no error")
	}
	id := v.start(bs, "", "")
	if err := wire.CheckRunID(id); err != nil || !strings.HasPrefix(id, "r-") {
		t.Errorf("generated run id %q: %v", id, err)
	}
	v.waitFor(id, func(*Record) bool { return true })
	if _, err := v.client.Start(v.ctx, bs, nil, id); !errors.Is(err, ErrExists) {
		t.Errorf("a second start of %s: %v, want ErrExists", id, err)
	}
	if _, err := v.client.Get(v.ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of no run: %v, want ErrNotFound", err)
	}
	if _, err := v.client.Get(v.ctx, "a*"); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("Get of a wildcard: %v, want an invalid run id", err)
	}
	if _, err := v.client.Events(v.ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Events of no run: %v, want ErrNotFound", err)
	}
	if NewRunID() == NewRunID() {
		t.Error("two generated run ids are equal")
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without a Box: no error")
	}
	v := newEnv(t)
	if _, err := New(Config{Box: v.box, AckWait: -time.Second}); err == nil {
		t.Error("New with a negative AckWait: no error")
	}
	if err := v.eng.Run(v.ctx); err == nil {
		t.Error("a second Run of the same engine: no error")
	}
}

func TestListAndWatch(t *testing.T) {
	v := newEnv(t)
	now := time.Now()
	times := []time.Time{now.Add(2 * time.Minute), now.Add(time.Minute), now.Add(3 * time.Minute)}
	v.client = NewClient(ClientConfig{Box: v.box, Now: func() time.Time {
		at := times[0]
		times = times[1:]
		return at
	}})
	bs := loopWorkflow(t, 2)
	// The worker answers once the watch has seen the run running, so that the watch sees a
	// save before the last however fast the machine is.
	sawRunning := make(chan struct{})
	v.worker("think").serve(func(task *protocol.Task) *protocol.Event {
		<-sawRunning
		return continued(task, `"again"`)
	})

	// Watch a run before it exists: the watch waits for it, yields every save, ends at the end.
	watched := make(chan []protocol.RunStatus, 1)
	go func() {
		var seen []protocol.RunStatus
		for rec, err := range v.client.Watch(v.ctx, "second") {
			if err != nil {
				t.Errorf("Watch: %v", err)
				break
			}
			if len(seen) == 0 {
				close(sawRunning)
			}
			seen = append(seen, rec.Run.Status)
		}
		watched <- seen
	}()
	hang := workflow.New("hang")
	hang.Task("wait", "nobody")
	_, hangBS := bundles(t, hang)
	v.start(hangBS, "", "first")
	v.start(bs, "", "second")
	v.waitFor("first", func(*Record) bool { return true })
	if err := v.client.Cancel(v.ctx, "first", ""); err != nil {
		t.Fatal(err)
	}
	v.wait("first")
	v.wait("second")
	seen := <-watched
	if len(seen) < 2 || seen[len(seen)-1] != protocol.RunCompleted || seen[0] != protocol.RunRunning {
		t.Fatalf("watched %v", seen)
	}

	all, err := v.client.List(v.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Run.ID != "second" || all[1].Run.ID != "first" {
		t.Fatalf("List: %v, want second (started earlier) then first", ids(all))
	}
	cancelled, err := v.client.List(v.ctx, protocol.RunCancelled)
	if err != nil {
		t.Fatal(err)
	}
	if len(cancelled) != 1 || cancelled[0].Run.ID != "first" || cancelled[0].Run.Error.Message != "the run was cancelled" {
		t.Fatalf("List cancelled: %v", ids(cancelled))
	}
}

func ids(recs []*Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Run.ID)
	}
	return out
}

func TestNewResultWithoutDefinition(t *testing.T) {
	data, err := json.Marshal(NewResult(nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(data); got != `{"run_id":"","status":"","output":null,"error":null,"steps":[],"path":[]}` {
		t.Fatalf("empty result %s", got)
	}
	rec := &Record{Run: &engine.Run{ID: "r", Status: protocol.RunRunning, Steps: map[string]*engine.StepRun{
		"b": {Status: protocol.StepPending}, "a": {Status: protocol.StepRunning, Iteration: 1, Attempts: 1},
	}}}
	res := NewResult(nil, rec)
	if len(res.Steps) != 2 || res.Steps[0].ID != "a" || res.Steps[1].ID != "b" {
		t.Fatalf("steps %+v: want them by id without a definition", res.Steps)
	}
}
