package workflow_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/workflow"
)

// tTriggers is a valid workflow file with one trigger of each kind.
const tTriggers = `name = "orders"

[[steps]]
id = "work"
type = "task"
handler = "orders.work"

[[triggers]]
name = "every-5"
schedule = "*/5 * * * *"
timezone = "Europe/Paris"
overlap = "queue"
catch_up = 3

[[triggers]]
name = "created"
subject = "orders.created"

[[triggers]]
name = "refunds"
webhook = "refunds"
`

func TestTriggersParseAndValidate(t *testing.T) {
	def, ps := workflow.Parse("orders.toml", []byte(tTriggers))
	if len(ps) > 0 {
		t.Fatalf("parse: %v", ps)
	}
	if ps := workflow.Validate(def, workflow.Options{}); len(ps) > 0 {
		t.Fatalf("validate: %v", ps)
	}
	if len(def.Triggers) != 3 || def.Triggers[0].Schedule != "*/5 * * * *" || *def.Triggers[0].CatchUp != 3 ||
		def.Triggers[1].Kind() != "subject" || def.Triggers[2].Webhook != "refunds" {
		t.Fatalf("triggers: %+v", def.Triggers)
	}
	if got := def.Source.Line("triggers[1].subject"); got != 17 {
		t.Fatalf("line of triggers[1].subject = %d, want 17", got)
	}
}

// TestTriggerProblems: each bad trigger is one problem with its code, at the line of its key.
func TestTriggerProblems(t *testing.T) {
	const head = "name = \"w\"\n[[steps]]\nid = \"a\"\ntype = \"task\"\nhandler = \"h\"\n[[triggers]]\n" // triggers[0] is at line 6
	cases := []struct {
		name, body string
		want       string // CODE key
		line       int
	}{
		{"bad cron", "name = \"t\"\nschedule = \"*/5 * * *\"\n", "E_BAD_SCHEDULE triggers[0].schedule", 8},
		{"six fields", "name = \"t\"\nschedule = \"0 */5 * * * *\"\n", "E_BAD_SCHEDULE triggers[0].schedule", 8},
		{"out of range", "name = \"t\"\nschedule = \"61 * * * *\"\n", "E_BAD_SCHEDULE triggers[0].schedule", 8},
		{"never due", "name = \"t\"\nschedule = \"0 0 30 2 *\"\n", "E_BAD_SCHEDULE triggers[0].schedule", 8},
		{"interval", "name = \"t\"\nschedule = \"@every 5m\"\n", "E_BAD_SCHEDULE triggers[0].schedule", 8},
		{"zone inside", "name = \"t\"\nschedule = \"CRON_TZ=UTC 0 * * * *\"\n", "E_BAD_SCHEDULE triggers[0].schedule", 8},
		{"bad zone", "name = \"t\"\nschedule = \"0 * * * *\"\ntimezone = \"Mars/Olympus\"\n", "E_BAD_TIMEZONE triggers[0].timezone", 9},
		{"zone as path", "name = \"t\"\nschedule = \"0 * * * *\"\ntimezone = \"../../etc/passwd\"\n", "E_BAD_TIMEZONE triggers[0].timezone", 9},
		{"local zone", "name = \"t\"\nschedule = \"0 * * * *\"\ntimezone = \"Local\"\n", "E_BAD_TIMEZONE triggers[0].timezone", 9},
		{"overlap", "name = \"t\"\nschedule = \"0 * * * *\"\noverlap = \"wait\"\n", "E_BAD_VALUE triggers[0].overlap", 9},
		{"catch up", "name = \"t\"\nschedule = \"0 * * * *\"\ncatch_up = 101\n", "E_BAD_BOUND triggers[0].catch_up", 9},
		{"negative catch up", "name = \"t\"\nschedule = \"0 * * * *\"\ncatch_up = -1\n", "E_BAD_BOUND triggers[0].catch_up", 9},
		{"none", "name = \"t\"\n", "E_BAD_TRIGGER triggers[0]", 6},
		{"several", "name = \"t\"\nschedule = \"0 * * * *\"\nsubject = \"a.b\"\n", "E_BAD_TRIGGER triggers[0].subject", 9},
		{"overlap on subject", "name = \"t\"\nsubject = \"a.b\"\noverlap = \"skip\"\n", "E_BAD_TRIGGER triggers[0].overlap", 9},
		{"no name", "schedule = \"0 * * * *\"\n", "E_MISSING_KEY triggers[0].name", 6},
		{"bad name", "name = \"a b\"\nwebhook = \"x\"\n", "E_BAD_NAME triggers[0].name", 7},
		{"bad webhook", "name = \"t\"\nwebhook = \"Refunds/x\"\n", "E_BAD_NAME triggers[0].webhook", 8},
		{"subject syntax", "name = \"t\"\nsubject = \"orders..created\"\n", "E_BAD_SUBJECT triggers[0].subject", 8},
		{"subject reins", "name = \"t\"\nsubject = \"reins.event.>\"\n", "E_BAD_SUBJECT triggers[0].subject", 8},
		{"subject namespace reins", "name = \"t\"\nsubject = \"acme.reins.>\"\n", "E_BAD_SUBJECT triggers[0].subject", 8},
		{"subject JS", "name = \"t\"\nsubject = \"$JS.API.>\"\n", "E_BAD_SUBJECT triggers[0].subject", 8},
		{"subject KV", "name = \"t\"\nsubject = \"$KV.reins_runs.>\"\n", "E_BAD_SUBJECT triggers[0].subject", 8},
		{"subject inbox", "name = \"t\"\nsubject = \"_INBOX.>\"\n", "E_BAD_SUBJECT triggers[0].subject", 8},
		{"subject SYS", "name = \"t\"\nsubject = \"$SYS.>\"\n", "E_BAD_SUBJECT triggers[0].subject", 8},
		{"subject all", "name = \"t\"\nsubject = \">\"\n", "E_BAD_SUBJECT triggers[0].subject", 8},
		{"subject wildcard first", "name = \"t\"\nsubject = \"*.created\"\n", "E_BAD_SUBJECT triggers[0].subject", 8},
		{"unknown key", "name = \"t\"\nwebhook = \"x\"\nsecret = \"s\"\n", "E_UNKNOWN_KEY triggers[0].secret", 9},
		{"empty", "name = \"t\"\nsubject = \"\"\n", "E_BAD_TRIGGER triggers[0].subject", 8},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			def, ps := workflow.Parse("w.toml", []byte(head+c.body))
			if def == nil {
				t.Fatalf("parse: %v", ps)
			}
			ps = append(ps, workflow.Validate(def, workflow.Options{})...)
			if len(ps) != 1 {
				t.Fatalf("want one problem %s, got %v", c.want, ps)
			}
			if got := string(ps[0].Code) + " " + ps[0].Key; got != c.want || ps[0].Line != c.line {
				t.Fatalf("got %s at line %d (%s), want %s at line %d", got, ps[0].Line, ps[0].Message, c.want, c.line)
			}
		})
	}
	t.Run("wrong type", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "w.toml")
		if err := os.WriteFile(path, []byte(head+"name = \"t\"\nschedule = 5\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, ps := workflow.LoadAndValidate(path, workflow.Options{})
		vSame(t, ps, "E_TYPE triggers[0].schedule")
	})
	t.Run("duplicate name", func(t *testing.T) {
		def, _ := workflow.Parse("w.toml", []byte(head+"name = \"t\"\nwebhook = \"a\"\n[[triggers]]\nname = \"t\"\nwebhook = \"b\"\n"))
		vSame(t, workflow.Validate(def, workflow.Options{}), "E_DUPLICATE_ID triggers[1].name")
	})
}

// TestTriggersCanonical: a builder's triggers and a file's give the same hash, defaults filled
// in; a workflow without triggers keeps the hash it had before triggers existed (no member).
func TestTriggersCanonical(t *testing.T) {
	file, _ := workflow.Parse("orders.toml", []byte(tTriggers))
	three := 3
	b := workflow.New("orders")
	b.Task("work", "orders.work")
	b.Trigger(workflow.Trigger{Name: "every-5", Schedule: "*/5 * * * *", Timezone: "Europe/Paris", Overlap: workflow.OverlapQueue, CatchUp: &three}).
		Trigger(workflow.Trigger{Name: "created", Subject: "orders.created"}).
		Trigger(workflow.Trigger{Name: "refunds", Webhook: "refunds"})
	built, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	three = 4 // the builder copied it
	hf, _ := file.Hash()
	hb, _ := built.Hash()
	if hf != hb {
		a, _ := file.CanonicalJSON()
		c, _ := built.CanonicalJSON()
		t.Fatalf("hashes differ:\nfile  %s\nbuilt %s", a, c)
	}
	// Defaults: a schedule written without them is the one written with them.
	short := workflow.New("w")
	short.Task("a", "h")
	short.Trigger(workflow.Trigger{Name: "t", Schedule: "0 * * * *"})
	one := 1
	long := workflow.New("w")
	long.Task("a", "h")
	long.Trigger(workflow.Trigger{Name: "t", Schedule: "0 * * * *", Timezone: "UTC", Overlap: "skip", CatchUp: &one})
	ds, _ := short.Build()
	dl, _ := long.Build()
	if hs, _ := ds.Hash(); hs != func() string { h, _ := dl.Hash(); return h }() {
		t.Fatal("defaults change the hash")
	}
	plain := workflow.New("w")
	plain.Task("a", "h")
	dp, _ := plain.Build()
	j, _ := dp.CanonicalJSON()
	if strings.Contains(string(j), "triggers") {
		t.Fatalf("a workflow without triggers has a triggers member: %s", j)
	}
	// CanonicalJSON does not change the definition it reads.
	raw, _ := workflow.Parse("orders.toml", []byte("name = \"w\"\n[[steps]]\nid = \"a\"\ntype = \"task\"\nhandler = \"h\"\n[[triggers]]\nname = \"t\"\nschedule = \"0 * * * *\"\n"))
	_, _ = raw.CanonicalJSON()
	if raw.Triggers[0].Overlap != "" || raw.Triggers[0].CatchUp != nil {
		t.Fatalf("CanonicalJSON normalized the caller's triggers: %+v", raw.Triggers[0])
	}
}

func TestParseSchedule(t *testing.T) {
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	cases := []struct {
		expr, tz, after, want string
	}{
		{"*/5 * * * *", "", "2026-01-01T10:02:00Z", "2026-01-01T10:05:00Z"},
		{"*/5 * * * *", "", "2026-01-01T10:05:00Z", "2026-01-01T10:10:00Z"}, // strictly after
		{"0 9 * * 1-5", "Europe/Paris", "2026-01-02T09:00:00Z", "2026-01-05T08:00:00Z"},
		{"@daily", "America/New_York", "2026-01-01T12:00:00Z", "2026-01-02T05:00:00Z"},
		// DST in New York: 2026-03-08 02:00 local does not exist; 02:30 is not due that day.
		{"30 2 * * *", "America/New_York", "2026-03-07T08:00:00Z", "2026-03-09T06:30:00Z"},
		// 2026-11-01 01:30 local happens twice; it is due once, the first time (EDT).
		{"30 1 * * *", "America/New_York", "2026-11-01T04:00:00Z", "2026-11-01T05:30:00Z"},
	}
	for _, c := range cases {
		s, err := workflow.ParseSchedule(c.expr, c.tz)
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		if got := s.Next(at(c.after)); !got.Equal(at(c.want)) {
			t.Errorf("%s in %q after %s = %s, want %s", c.expr, c.tz, c.after, got.Format(time.RFC3339), c.want)
		}
	}
	s, _ := workflow.ParseSchedule("30 1 * * *", "America/New_York")
	if got := s.Next(at("2026-11-01T05:30:00Z")); !got.Equal(at("2026-11-02T06:30:00Z")) {
		t.Errorf("the repeated 01:30 is due again at %s", got.Format(time.RFC3339))
	}
	_, err := workflow.ParseSchedule("* * * * *", "Nowhere/Else")
	var se *workflow.ScheduleError
	if !errors.As(err, &se) || se.Code != workflow.EBadTimezone {
		t.Fatalf("bad zone: %v", err)
	}
}

func TestSubjectWithin(t *testing.T) {
	cases := []struct {
		p, allowed string
		want       bool
	}{
		{"orders.created", "orders.>", true},
		{"orders.*", "orders.>", true},
		{"orders.>", "orders.>", true},
		{"orders", "orders.>", false},
		{"orders.>", "orders.*", false},
		{"orders.created", "orders.*", true},
		{"orders.*", "orders.*", true},
		{"orders.a.b", "orders.*", false},
		{"billing.created", "orders.>", false},
		{"orders.created", "orders.created", true},
		{"orders.*", "orders.created", false},
	}
	for _, c := range cases {
		if got := workflow.SubjectWithin(c.p, c.allowed); got != c.want {
			t.Errorf("SubjectWithin(%q, %q) = %v, want %v", c.p, c.allowed, got, c.want)
		}
	}
	for s, want := range map[string]bool{"reins.event.01.r": true, "acme.reins.task.x": true, "$JS.API.INFO": true, "_INBOX.abc": true, "orders.created": false, "orders": false} {
		if got := workflow.ReservedSubject(s); got != want {
			t.Errorf("ReservedSubject(%q) = %v, want %v", s, got, want)
		}
	}
}

// FuzzTrigger: no schedule, zone or subject panics the parsers; what CheckSubject accepts is
// within itself and never reserved; a schedule that parses gives due times strictly after the
// time asked, in order.
func FuzzTrigger(f *testing.F) {
	for _, s := range []string{"*/5 * * * *", "0 9 * * 1-5", "@daily", "@every 1s", "0 0 30 2 *", "1-59/0 * * * *", "*/0 * * * *", "0-100 * * * *", "? ? ? ? ?", "L W # * *"} {
		f.Add(s, "UTC", "orders.created")
	}
	f.Add("0 * * * *", "Europe/Paris", "a.*.>")
	f.Add("", "../x", "$KV.>")
	f.Fuzz(func(t *testing.T, expr, tz, subj string) {
		if s, err := workflow.ParseSchedule(expr, tz); err == nil {
			from := time.Date(2026, 3, 8, 6, 59, 0, 0, time.UTC)
			prev := from
			for range 3 {
				n := s.Next(prev)
				if n.IsZero() {
					break
				}
				if !n.After(prev) {
					t.Fatalf("%q: Next(%s) = %s, not after", expr, prev, n)
				}
				prev = n
			}
		} else {
			var se *workflow.ScheduleError
			if !errors.As(err, &se) || se.Msg == "" {
				t.Fatalf("%q %q: error %v is not a ScheduleError with a message", expr, tz, err)
			}
		}
		if workflow.CheckSubject(subj) == nil {
			if !workflow.SubjectWithin(subj, subj) {
				t.Fatalf("%q is not within itself", subj)
			}
			if !strings.ContainsAny(subj, "*>") && workflow.ReservedSubject(subj) {
				t.Fatalf("CheckSubject accepted the reserved subject %q", subj)
			}
		}
	})
}
