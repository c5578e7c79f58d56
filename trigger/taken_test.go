package trigger_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/trigger"
)

// TestScheduleRunIDTaken: a due time whose run id names a run the trigger did not start (one a
// client took before client ids were kept out of triggers' space) starts nothing, and the
// schedule goes on: the next due time starts its run.
func TestScheduleRunIDTaken(t *testing.T) {
	v := runtest.New(t)
	reg := register(t, v, "tick", every5)
	bs, err := v.Client.Bundles(v.Ctx, reg)
	if err != nil {
		t.Fatal(err)
	}
	due := func(m int) string {
		return trigger.RunID("schedule", "tick", "every-5", trigger.DueKey(time.Date(2026, 1, 1, 10, m, 0, 0, time.UTC)))
	}
	// The engine no longer takes a person's start of such an id: the run is made as one the
	// server started as mallory, as a run taken before the rule was.
	if _, err := v.Client.StartWith(v.Ctx, bs, nil, client.StartOptions{RunID: due(5), Trigger: true, As: "mallory"}); err != nil {
		t.Fatal(err)
	}
	vc := clock.NewVirtual(time.Date(2026, 1, 1, 10, 4, 0, 0, time.UTC))
	s := service(t, v, vc)
	tick(t, v, s)
	// state is the run the schedule last started, as its state in the triggers bucket says.
	state := func() string {
		e, err := v.KV(natsbox.TriggersBucket).Get(v.Ctx, trigger.ScheduleKey("tick", "every-5"))
		if err != nil {
			t.Fatal(err)
		}
		var st trigger.State
		if err := json.Unmarshal(e.Value(), &st); err != nil {
			t.Fatal(err)
		}
		return st.Run
	}
	vc.Advance(time.Minute)
	tick(t, v, s) // no error: the taken due time does not hold the schedule
	if n, run := starts(t, v, due(5)), state(); n != 1 || run == due(5) {
		t.Fatalf("the taken due time: %d starts (want mallory's only); the schedule's run is %q, which it did not start", n, run)
	}
	vc.Advance(5 * time.Minute)
	tick(t, v, s)
	if run := state(); run != due(10) || starts(t, v, due(10)) != 1 {
		t.Fatalf("the next due time: the schedule's run is %q, want %s, started once", run, due(10))
	}
}
