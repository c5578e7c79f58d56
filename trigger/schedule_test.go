package trigger_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/runner"
	"github.com/reins-run/reins/trigger"
	"github.com/reins-run/reins/workflow"
)

// register registers the workflow file src as name, as admin.
func register(t *testing.T, v *runtest.Env, name, src string) client.Registered {
	t.Helper()
	def, ps := workflow.Parse(name+".toml", []byte(src))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	if ps := workflow.Validate(def, workflow.Options{OneFile: true}); len(ps) > 0 {
		t.Fatal(ps)
	}
	def.Normalize()
	reg, _, err := v.Client.Register(v.Ctx, name, []byte(src), def)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// starts counts the start events of run id in the events stream: a run started twice would
// have two (within the duplicate window, one is dropped as a duplicate; beyond it, client.Start
// finds the run).
func starts(t *testing.T, v *runtest.Env, id string) int {
	t.Helper()
	evs, err := v.Client.Events(v.Ctx, id)
	if errors.Is(err, client.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.Type == protocol.EvStart {
			n++
		}
	}
	return n
}

const every5 = `name = "tick"
[[steps]]
id = "work"
type = "task"
handler = "tick.work"
[[triggers]]
name = "every-5"
schedule = "*/5 * * * *"
overlap = "allow"
`

func service(t *testing.T, v *runtest.Env, vc clock.Clock) *trigger.Service {
	t.Helper()
	s := trigger.New(trigger.Config{Conn: (*conn.Conn)(v.Box), Clock: vc, Log: runtest.Logger(t)})
	if err := s.Sync(v.Ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

func tick(t *testing.T, v *runtest.Env, s *trigger.Service) time.Time {
	t.Helper()
	next, err := s.Tick(v.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	return next
}

// TestScheduleOncePerDueTime: two engines decide the same schedule at the same due times, at
// once: each due time starts one run; the process restarted after a downtime (the NATS server
// and the data directory reopened) starts the most recent missed due time once (catch_up 1)
// and none of the others.
func TestScheduleOncePerDueTime(t *testing.T) {
	dir := t.TempDir()
	v := runtest.NewWithin(t, dir, 60*time.Second)
	register(t, v, "tick", every5)
	vc := clock.NewVirtual(time.Date(2026, 1, 1, 10, 2, 0, 0, time.UTC))
	a, b := service(t, v, vc), service(t, v, vc)
	if next := tick(t, v, a); !next.Equal(time.Date(2026, 1, 1, 10, 5, 0, 0, time.UTC)) {
		t.Fatalf("next due %s, want 10:05", next)
	}
	due := func(h, m int) string {
		return trigger.RunID("schedule", "tick", "every-5", trigger.DueKey(time.Date(2026, 1, 1, h, m, 0, 0, time.UTC)))
	}
	for _, m := range []int{5, 10, 15} {
		vc.Advance(5 * time.Minute)
		var wg sync.WaitGroup
		for _, s := range []*trigger.Service{a, b, a, b} {
			wg.Go(func() {
				if _, err := s.Tick(v.Ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if n := starts(t, v, due(10, m)); n != 1 {
			t.Fatalf("due time 10:%02d: %d starts, want 1", m, n)
		}
	}
	if n := starts(t, v, due(10, 0)); n != 0 {
		t.Fatalf("10:00, before the trigger was seen, started %d runs", n)
	}

	// Down from 10:16 to 10:32: the process ends, and its NATS server with it.
	_ = v.Box.Close()
	vc.Advance(17 * time.Minute)
	v = runtest.NewWithin(t, dir, 60*time.Second)
	c := service(t, v, vc)
	tick(t, v, c)
	tick(t, v, c)
	if n := starts(t, v, due(10, 30)); n != 1 {
		t.Fatalf("the most recent missed due time: %d starts, want 1", n)
	}
	for _, m := range []int{20, 25} {
		if n := starts(t, v, due(10, m)); n != 0 {
			t.Fatalf("10:%d, missed beyond catch_up 1, started %d runs", m, n)
		}
	}
	// The same due times again, from a new process that saw nothing: nothing new.
	d := service(t, v, vc)
	tick(t, v, d)
	if n := starts(t, v, due(10, 30)); n != 1 {
		t.Fatalf("decided again: %d starts of 10:30, want 1", n)
	}
}

// TestScheduleOverlap: with an engine running the runs, skip starts no run while the previous
// one runs, queue starts the latest waiting one when it ends, allow starts every one.
func TestScheduleOverlap(t *testing.T) {
	for _, c := range []struct {
		overlap string
		// runs at 10:05 (held), 10:10, 10:15, then the 10:05 run ends at 10:16, and 10:20
		want map[int]int // minute → starts
	}{
		{"skip", map[int]int{5: 1, 10: 0, 15: 0, 20: 1}},
		{"queue", map[int]int{5: 1, 10: 0, 15: 1, 20: 1}},
		{"allow", map[int]int{5: 1, 10: 1, 15: 1, 20: 1}},
	} {
		t.Run(c.overlap, func(t *testing.T) {
			v := runtest.New(t)
			eng, err := runner.New(runner.Config{Conn: (*conn.Conn)(v.Box), AckWait: runtest.AckWait, Logger: runtest.Logger(t)})
			if err != nil {
				t.Fatal(err)
			}
			v.Go(eng.Run, eng.Ready())
			w := v.Worker("tick.work")
			src := "name = \"tick\"\n[[steps]]\nid = \"work\"\ntype = \"task\"\nhandler = \"tick.work\"\n[[triggers]]\nname = \"every-5\"\nschedule = \"*/5 * * * *\"\noverlap = \"" + c.overlap + "\"\n"
			register(t, v, "tick", src)
			vc := clock.NewVirtual(time.Date(2026, 1, 1, 10, 2, 0, 0, time.UTC))
			s := service(t, v, vc)
			tick(t, v, s)
			id := func(m int) string {
				return trigger.RunID("schedule", "tick", "every-5", trigger.DueKey(time.Date(2026, 1, 1, 10, m, 0, 0, time.UTC)))
			}
			vc.Advance(3 * time.Minute) // 10:05
			tick(t, v, s)
			first := w.Next() // the 10:05 run's task: held until 10:16
			v.WaitFor(id(5), func(r *client.Record) bool { return r.Run.Status == protocol.RunRunning })
			for range 2 { // 10:10, 10:15
				vc.Advance(5 * time.Minute)
				tick(t, v, s)
			}
			vc.Advance(time.Minute) // 10:16: the 10:05 run ends
			v.Publish(runtest.Completed(first, `{}`), "")
			v.Wait(id(5))
			tick(t, v, s)
			if c.overlap == "queue" {
				w.Serve(func(tk *protocol.Task) *protocol.Event { return runtest.Completed(tk, `{}`) })
				v.Wait(id(15))
			}
			vc.Advance(4 * time.Minute) // 10:20
			tick(t, v, s)
			for m, want := range c.want {
				if n := starts(t, v, id(m)); n != want {
					t.Errorf("10:%02d: %d starts, want %d", m, n, want)
				}
			}
		})
	}
}

// TestScheduleAsRegistrant: a trigger's run is started as the principal that registered the
// workflow, and says which trigger and due time started it in its input.
func TestScheduleAsRegistrant(t *testing.T) {
	v := runtest.New(t)
	register(t, v, "tick", every5)
	vc := clock.NewVirtual(time.Date(2026, 1, 1, 10, 4, 0, 0, time.UTC))
	s := service(t, v, vc)
	tick(t, v, s)
	vc.Advance(time.Minute)
	tick(t, v, s)
	id := trigger.RunID("schedule", "tick", "every-5", "2026-01-01T10:05:00Z")
	evs, err := v.Client.Events(context.Background(), id)
	if err != nil || len(evs) != 1 {
		t.Fatalf("events %v, %v", evs, err)
	}
	if got := string(evs[0].Input); got != `{"due":"2026-01-01T10:05:00Z","trigger":"every-5"}` {
		t.Fatalf("input %s", got)
	}
	if evs[0].By != "admin" {
		t.Fatalf("started by %q, want admin (who registered it)", evs[0].By)
	}
}
