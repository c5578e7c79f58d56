package trigger_test

import (
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/trigger"
	"github.com/reins-run/reins/workflow"
)

func at(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

func times(t *testing.T, ss ...string) []time.Time {
	out := []time.Time{}
	for _, s := range ss {
		out = append(out, at(t, s))
	}
	return out
}

func TestPlan(t *testing.T) {
	n := func(i int) *int { return &i }
	every5 := workflow.Trigger{Name: "t", Schedule: "*/5 * * * *", Overlap: workflow.OverlapSkip, CatchUp: n(1)}
	with := func(f func(*workflow.Trigger)) workflow.Trigger { tr := every5; f(&tr); return tr }
	cases := []struct {
		name    string
		tr      workflow.Trigger
		st      trigger.State
		running bool
		now     string
		fire    []string
		last    string // State.Last after
		queued  string
		skipped int
	}{
		{name: "new trigger starts from now", tr: every5, now: "2026-01-01T10:07:00Z", last: "2026-01-01T10:07:00Z"},
		{name: "not due yet", tr: every5, st: trigger.State{Last: at(t, "2026-01-01T10:05:00Z")}, now: "2026-01-01T10:09:59Z", last: "2026-01-01T10:05:00Z"},
		{name: "due now", tr: every5, st: trigger.State{Last: at(t, "2026-01-01T10:05:00Z")}, now: "2026-01-01T10:10:00Z", fire: []string{"2026-01-01T10:10:00Z"}, last: "2026-01-01T10:10:00Z"},
		{name: "a little late is on time", tr: with(func(tr *workflow.Trigger) { tr.CatchUp = n(0) }), st: trigger.State{Last: at(t, "2026-01-01T10:05:00Z")}, now: "2026-01-01T10:10:59Z", fire: []string{"2026-01-01T10:10:00Z"}, last: "2026-01-01T10:10:00Z"},
		{name: "downtime: the most recent missed one", tr: every5, st: trigger.State{Last: at(t, "2026-01-01T10:00:00Z")}, now: "2026-01-01T10:32:00Z",
			fire: []string{"2026-01-01T10:30:00Z"}, last: "2026-01-01T10:30:00Z", skipped: 5},
		{name: "downtime: catch_up 0 starts none", tr: with(func(tr *workflow.Trigger) { tr.CatchUp = n(0) }), st: trigger.State{Last: at(t, "2026-01-01T10:00:00Z")}, now: "2026-01-01T10:32:00Z",
			last: "2026-01-01T10:30:00Z", skipped: 6},
		{name: "downtime: catch_up 3 with allow", tr: with(func(tr *workflow.Trigger) { tr.CatchUp = n(3); tr.Overlap = workflow.OverlapAllow }), st: trigger.State{Last: at(t, "2026-01-01T10:00:00Z")}, now: "2026-01-01T10:32:00Z",
			fire: []string{"2026-01-01T10:20:00Z", "2026-01-01T10:25:00Z", "2026-01-01T10:30:00Z"}, last: "2026-01-01T10:30:00Z", skipped: 3},
		{name: "downtime: catch_up 3 with skip starts the first, skips the others", tr: with(func(tr *workflow.Trigger) { tr.CatchUp = n(3) }), st: trigger.State{Last: at(t, "2026-01-01T10:00:00Z")}, now: "2026-01-01T10:32:00Z",
			fire: []string{"2026-01-01T10:20:00Z"}, last: "2026-01-01T10:30:00Z", skipped: 5},
		{name: "downtime with an on-time one and catch_up 1", tr: every5, st: trigger.State{Last: at(t, "2026-01-01T10:00:00Z")}, now: "2026-01-01T10:15:30Z",
			fire: []string{"2026-01-01T10:10:00Z"}, last: "2026-01-01T10:15:00Z", skipped: 2}, // 10:15 is on time but 10:10's run runs: skip
		{name: "skip while running", tr: every5, st: trigger.State{Last: at(t, "2026-01-01T10:05:00Z"), Run: "r"}, running: true, now: "2026-01-01T10:10:00Z", last: "2026-01-01T10:10:00Z", skipped: 1},
		{name: "allow while running", tr: with(func(tr *workflow.Trigger) { tr.Overlap = workflow.OverlapAllow }), st: trigger.State{Last: at(t, "2026-01-01T10:05:00Z"), Run: "r"}, running: true, now: "2026-01-01T10:10:00Z",
			fire: []string{"2026-01-01T10:10:00Z"}, last: "2026-01-01T10:10:00Z"},
		{name: "queue while running", tr: with(func(tr *workflow.Trigger) { tr.Overlap = workflow.OverlapQueue }), st: trigger.State{Last: at(t, "2026-01-01T10:05:00Z"), Run: "r"}, running: true, now: "2026-01-01T10:10:00Z",
			last: "2026-01-01T10:10:00Z", queued: "2026-01-01T10:10:00Z"},
		{name: "queue keeps one: the latest", tr: with(func(tr *workflow.Trigger) { tr.Overlap = workflow.OverlapQueue }), st: trigger.State{Last: at(t, "2026-01-01T10:10:00Z"), Queued: at(t, "2026-01-01T10:10:00Z"), Run: "r"}, running: true, now: "2026-01-01T10:15:00Z",
			last: "2026-01-01T10:15:00Z", queued: "2026-01-01T10:15:00Z", skipped: 1},
		{name: "queued fires when the run ended", tr: with(func(tr *workflow.Trigger) { tr.Overlap = workflow.OverlapQueue }), st: trigger.State{Last: at(t, "2026-01-01T10:10:00Z"), Queued: at(t, "2026-01-01T10:10:00Z"), Run: "r"}, now: "2026-01-01T10:12:00Z",
			fire: []string{"2026-01-01T10:10:00Z"}, last: "2026-01-01T10:10:00Z"},
		{name: "queued fires, and the next due one queues behind it", tr: with(func(tr *workflow.Trigger) { tr.Overlap = workflow.OverlapQueue }), st: trigger.State{Last: at(t, "2026-01-01T10:10:00Z"), Queued: at(t, "2026-01-01T10:10:00Z"), Run: "r"}, now: "2026-01-01T10:15:00Z",
			fire: []string{"2026-01-01T10:10:00Z"}, last: "2026-01-01T10:15:00Z", queued: "2026-01-01T10:15:00Z"},
		{name: "time zone", tr: workflow.Trigger{Name: "t", Schedule: "0 9 * * *", Timezone: "Europe/Paris", Overlap: "skip", CatchUp: n(1)}, st: trigger.State{Last: at(t, "2026-07-01T06:00:00Z")}, now: "2026-07-01T07:00:10Z",
			fire: []string{"2026-07-01T07:00:00Z"}, last: "2026-07-01T07:00:00Z"},
		{name: "DST: the repeated hour is due once", tr: workflow.Trigger{Name: "t", Schedule: "30 1 * * *", Timezone: "America/New_York", Overlap: "allow", CatchUp: n(5)}, st: trigger.State{Last: at(t, "2026-11-01T04:00:00Z")}, now: "2026-11-01T07:00:00Z",
			fire: []string{"2026-11-01T05:30:00Z"}, last: "2026-11-01T05:30:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := workflow.ParseSchedule(c.tr.Schedule, c.tr.Timezone)
			if err != nil {
				t.Fatal(err)
			}
			d := trigger.Plan(s, c.tr, c.st, c.running, at(t, c.now))
			if got, want := d.Fire, times(t, c.fire...); !equalTimes(got, want) {
				t.Errorf("fire %v, want %v", got, want)
			}
			if !d.State.Last.Equal(at(t, c.last)) {
				t.Errorf("last %s, want %s", d.State.Last, c.last)
			}
			if q := d.State.Queued; (c.queued == "" && !q.IsZero()) || (c.queued != "" && !q.Equal(at(t, c.queued))) {
				t.Errorf("queued %s, want %q", q, c.queued)
			}
			if d.Skipped != c.skipped {
				t.Errorf("skipped %d, want %d", d.Skipped, c.skipped)
			}
			// Deciding again at the same time with the state saved starts nothing more.
			again := trigger.Plan(s, c.tr, d.State, true, at(t, c.now))
			if len(again.Fire) > 0 && c.tr.Overlap != workflow.OverlapAllow {
				t.Errorf("decided again, it fires %v", again.Fire)
			}
			if c.tr.Overlap == workflow.OverlapAllow {
				if again := trigger.Plan(s, c.tr, d.State, false, at(t, c.now)); len(again.Fire) > 0 {
					t.Errorf("decided again, it fires %v", again.Fire)
				}
			}
		})
	}
}

// TestPlanLongDowntime: a downtime of more due times than MaxScan moves Last on in steps and
// starts the most recent missed one only (the one on time then overlaps it).
func TestPlanLongDowntime(t *testing.T) {
	one := 1
	tr := workflow.Trigger{Name: "t", Schedule: "* * * * *", Overlap: "skip", CatchUp: &one}
	s, _ := workflow.ParseSchedule(tr.Schedule, "")
	st := trigger.State{Last: at(t, "2026-01-01T00:00:00Z")}
	now := at(t, "2026-04-01T00:05:30Z")
	var fired []time.Time
	for i := 0; ; i++ {
		if i > 10 {
			t.Fatal("Plan does not converge")
		}
		d := trigger.Plan(s, tr, st, false, now)
		fired = append(fired, d.Fire...)
		st = d.State
		if !d.More {
			break
		}
	}
	if !equalTimes(fired, times(t, "2026-04-01T00:04:00Z")) { // then 00:05, on time, overlaps it: skipped
		t.Fatalf("fired %v", fired)
	}
}

func TestRunID(t *testing.T) {
	a := trigger.RunID("schedule", "orders", "every-5", "2026-01-01T10:05:00Z")
	if a != trigger.RunID("schedule", "orders", "every-5", "2026-01-01T10:05:00Z") {
		t.Fatal("not deterministic")
	}
	for _, other := range []string{
		trigger.RunID("schedule", "orders", "every-5", "2026-01-01T10:10:00Z"),
		trigger.RunID("schedule", "orders2", "every-5", "2026-01-01T10:05:00Z"),
		trigger.RunID("webhook", "orders", "every-5", "2026-01-01T10:05:00Z"),
	} {
		if other == a {
			t.Fatalf("%s is the id of another key", a)
		}
	}
	long := trigger.RunID("subject", strings.Repeat("w", 64), strings.Repeat("T", 64), strings.Repeat("k", 1000))
	for _, id := range []string{a, long} {
		if err := wire.CheckRunID(id); err != nil || !strings.HasPrefix(id, "t-") {
			t.Fatalf("%s: %v", id, err)
		}
		// The server's own: no client may start a run with it (wire.ServerRunID).
		if wire.CheckClientRunID(id) == nil || wire.ServerRunID(id) == "" {
			t.Fatalf("%s is not in the server's space of run ids", id)
		}
	}
}

func TestSign(t *testing.T) {
	secret, body := []byte("s3cret"), []byte(`{"refund":1}`)
	sig := trigger.Sign(secret, body)
	for _, c := range []struct {
		secret []byte
		body   []byte
		sig    string
		want   bool
	}{
		{secret, body, sig, true},
		{secret, body, strings.TrimPrefix(sig, "sha256="), true},
		{secret, []byte(`{"refund":2}`), sig, false},
		{[]byte("other"), body, sig, false},
		{nil, body, trigger.Sign(nil, body), false},
		{secret, body, "", false},
		{secret, body, "sha256=zz", false},
		{secret, body, sig[:len(sig)-2], false},
	} {
		if got := trigger.Verify(c.secret, c.body, c.sig); got != c.want {
			t.Errorf("Verify(%q, %q, %q) = %v", c.secret, c.body, c.sig, got)
		}
	}
}

// FuzzPlan: whatever the schedule, state and time, Plan never fires a due time after now or
// twice, keeps at most catch_up missed ones, and never moves Last back.
func FuzzPlan(f *testing.F) {
	f.Add("*/5 * * * *", "UTC", "skip", 1, int64(0), int64(3600), false)
	f.Add("0 9 * * 1-5", "Europe/Paris", "queue", 3, int64(86400*3), int64(86400*10), true)
	f.Add("30 1 * * *", "America/New_York", "allow", 100, int64(0), int64(86400*400), false)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, expr, tz, overlap string, catchUp int, last, now int64, running bool) {
		s, err := workflow.ParseSchedule(expr, tz)
		if err != nil || catchUp < 0 || catchUp > workflow.MaxCatchUp || last < 0 || now < last || now-last > 86400*800 {
			return
		}
		tr := workflow.Trigger{Name: "t", Schedule: expr, Timezone: tz, Overlap: overlap, CatchUp: &catchUp}
		st := trigger.State{Last: base.Add(time.Duration(last) * time.Second)}
		at := base.Add(time.Duration(now) * time.Second)
		d := trigger.Plan(s, tr, st, running, at)
		if d.State.Last.Before(st.Last) || d.State.Last.After(at) {
			t.Fatalf("last moved to %s from %s (now %s)", d.State.Last, st.Last, at)
		}
		for i, f := range d.Fire {
			if f.After(at) || !f.After(st.Last) || i > 0 && !f.After(d.Fire[i-1]) {
				t.Fatalf("fires %v (last %s, now %s)", d.Fire, st.Last, at)
			}
		}
		late := 0
		for _, f := range d.Fire {
			if at.Sub(f) > trigger.Grace {
				late++
			}
		}
		if late > catchUp {
			t.Fatalf("fires %d missed due times, catch_up %d", late, catchUp)
		}
	})
}

func equalTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// BenchmarkPlan: one decision of a schedule at a due time (what every engine does at each due
// time of each schedule trigger, besides its KV read and write).
func BenchmarkPlan(b *testing.B) {
	one := 1
	tr := workflow.Trigger{Name: "t", Schedule: "*/5 * * * *", Overlap: "skip", CatchUp: &one}
	s, _ := workflow.ParseSchedule(tr.Schedule, "Europe/Paris")
	st := trigger.State{Last: time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)}
	now := time.Date(2026, 1, 1, 10, 5, 0, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		if d := trigger.Plan(s, tr, st, false, now); len(d.Fire) != 1 {
			b.Fatal(d)
		}
	}
}
