package workflow

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Trigger starts runs of a workflow by itself ([[triggers]]): on a schedule, on each message of
// a NATS subject, or on each delivery of a webhook. Exactly one of Schedule, Subject and Webhook
// is set. Triggers are active for the workflows registered with a server (reins serve); reins
// run runs a file once and ignores them. docs/workflows.md ("Triggers") has the semantics.
type Trigger struct {
	// Name identifies the trigger within its workflow: the state of a schedule and the ids of
	// the runs a trigger starts derive from (workflow, name), so renaming a trigger starts it
	// afresh.
	Name string `json:"name"`
	// Schedule is a cron expression of 5 fields (minute hour day-of-month month day-of-week)
	// or a descriptor (@hourly, @daily, @weekly, @monthly, @yearly), read in Timezone.
	Schedule string `json:"schedule,omitempty"`
	// Timezone is the IANA name of the zone Schedule is read in (default "UTC").
	Timezone string `json:"timezone,omitempty"`
	// Overlap is what a due time does while the trigger's previous run still runs: skip
	// (default: no run for it), queue (one run when the previous ends, at most one waiting),
	// allow (a run at once).
	Overlap string `json:"overlap,omitempty"`
	// CatchUp is how many due times missed while no engine ran start a run (the most recent
	// ones) when one starts again: default 1, 0 for none, at most MaxCatchUp.
	CatchUp *int `json:"catch_up,omitempty"`
	// Subject is a NATS subject (wildcards allowed): each message on it starts a run whose
	// input is the message, a JSON object. A server allows only the subjects its operator
	// lists.
	Subject string `json:"subject,omitempty"`
	// Webhook names a hook of the server: each POST /v1/hooks/NAME signed with the operator's
	// secret of that hook starts a run whose input is the body, a JSON object.
	Webhook string `json:"webhook,omitempty"`
}

// Overlap policies of schedule triggers.
const (
	OverlapSkip  = "skip"
	OverlapQueue = "queue"
	OverlapAllow = "allow"
)

// Defaults and bounds of schedule triggers.
const (
	DefaultTimezone = "UTC"
	DefaultCatchUp  = 1
	MaxCatchUp      = 100
)

// Kind names what fires the trigger: "schedule", "subject", "webhook", or "" when not exactly
// one of them is set.
func (t Trigger) Kind() string {
	kinds := t.kinds()
	if len(kinds) != 1 {
		return ""
	}
	return kinds[0]
}

func (t Trigger) kinds() []string {
	var k []string
	if t.Schedule != "" {
		k = append(k, "schedule")
	}
	if t.Subject != "" {
		k = append(k, "subject")
	}
	if t.Webhook != "" {
		k = append(k, "webhook")
	}
	return k
}

// CatchUpOr returns CatchUp, or [DefaultCatchUp] when unset.
func (t Trigger) CatchUpOr() int {
	if t.CatchUp == nil {
		return DefaultCatchUp
	}
	return *t.CatchUp
}

// normalize fills in a schedule trigger's defaults.
func (t *Trigger) normalize() {
	if t.Schedule == "" {
		return
	}
	if t.Timezone == "" {
		t.Timezone = DefaultTimezone
	}
	if t.Overlap == "" {
		t.Overlap = OverlapSkip
	}
	if t.CatchUp == nil {
		n := DefaultCatchUp
		t.CatchUp = &n
	}
}

// Schedule is a parsed schedule: the due times of a cron expression in a time zone.
type Schedule struct {
	expr  string
	sched cron.Schedule
	loc   *time.Location
}

// ScheduleError is why a schedule or time zone does not parse; Code says which of the two
// (EBadSchedule, EBadTimezone).
type ScheduleError struct {
	Code Code
	Msg  string
}

func (e *ScheduleError) Error() string { return e.Msg }

// scheduleParser reads 5 fields and the descriptors; seconds and time zones inside the
// expression are not accepted (the trigger's timezone key says the zone).
var scheduleParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// maxScheduleLen bounds an expression: a cron expression is short, and the parser's cost grows
// with ranges and lists.
const maxScheduleLen = 256

// ParseSchedule parses a cron expression of 5 fields (or @hourly, @daily, @weekly, @monthly,
// @yearly) read in the IANA time zone tz ("" is UTC). It refuses @every (its due times depend
// on when it is read, not on the clock: two engines would not agree), a zone inside the
// expression (CRON_TZ=, TZ=: use tz), and an expression that is never due. The error is a
// *ScheduleError.
func ParseSchedule(expr, tz string) (*Schedule, error) {
	if tz == "" {
		tz = DefaultTimezone
	}
	loc, err := loadZone(tz)
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) error {
		return &ScheduleError{Code: EBadSchedule, Msg: fmt.Sprintf(format, args...)}
	}
	e := strings.TrimSpace(expr)
	switch {
	case e == "":
		return nil, bad("the schedule is empty: want a cron expression of 5 fields such as \"*/5 * * * *\"")
	case len(e) > maxScheduleLen:
		return nil, bad("the schedule is %d characters long: a cron expression has at most %d", len(e), maxScheduleLen)
	case strings.HasPrefix(e, "@every"):
		return nil, bad("the schedule %q is an interval: want a cron expression of 5 fields (\"*/5 * * * *\") whose due times every engine computes alike", expr)
	case strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ="):
		return nil, bad("the schedule %q names a time zone: set the trigger's timezone key instead", expr)
	}
	s, err := parseCron(e)
	if err != nil {
		return nil, bad("the schedule %q is not a cron expression of 5 fields (minute hour day-of-month month day-of-week): %v", expr, err)
	}
	sch := &Schedule{expr: e, sched: s, loc: loc}
	// An expression such as "0 0 30 2 *" parses and is never due; the parser gives up after
	// five years and returns the zero time.
	if sch.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, bad("the schedule %q is never due (no date matches it)", expr)
	}
	return sch, nil
}

// parseCron runs the parser, which may panic on inputs it does not expect: a panic is an
// error like any other.
func parseCron(e string) (s cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("%v", r)
		}
	}()
	return scheduleParser.Parse(e)
}

// loadZone loads an IANA time zone, refusing what time.LoadLocation would read as a path.
func loadZone(tz string) (*time.Location, error) {
	bad := func(why string) error {
		return &ScheduleError{Code: EBadTimezone, Msg: fmt.Sprintf("the time zone %q %s: want an IANA name such as \"UTC\" or \"Europe/Paris\"", tz, why)}
	}
	if tz == "Local" || strings.HasPrefix(tz, "/") || strings.Contains(tz, "..") || strings.ContainsAny(tz, "\\\x00") || len(tz) > 64 {
		return nil, bad("is not an IANA name")
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, bad("is unknown")
	}
	return loc, nil
}

// Next returns the first due time strictly after t, in UTC; the zero time when there is none
// within five years. A wall-clock time that happens twice, in the hour repeated when clocks go
// back, is due once: the first time. One in the hour skipped when clocks go forward is not due
// that day.
func (s *Schedule) Next(t time.Time) time.Time {
	n := s.sched.Next(t.In(s.loc))
	for i := 0; !n.IsZero() && s.repeated(n) && i < 4; i++ {
		n = s.sched.Next(n)
	}
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// repeated reports whether n is the second time its wall clock reads what it reads: clocks
// went back within the last few hours by some offset d, and n-d read the same.
func (s *Schedule) repeated(n time.Time) bool {
	_, now := n.Zone()
	_, before := n.Add(-3 * time.Hour).In(s.loc).Zone()
	if before <= now {
		return false
	}
	m := n.Add(-time.Duration(before-now) * time.Second).In(s.loc)
	return m.Year() == n.Year() && m.YearDay() == n.YearDay() && m.Hour() == n.Hour() && m.Minute() == n.Minute()
}

// Location is the schedule's time zone.
func (s *Schedule) Location() *time.Location { return s.loc }

// String is the expression.
func (s *Schedule) String() string { return s.expr }

// Subject rules.

// MaxSubjectLen bounds a trigger's subject.
const MaxSubjectLen = 256

// ErrReservedSubject is wrapped by CheckSubject's error for a subject reins or NATS keep for
// themselves.
var ErrReservedSubject = errors.New("reserved subject")

// CheckSubject reports whether subj can be a trigger's subject: a NATS subject (tokens of
// printable characters without whitespace, '*' a whole token, '>' the whole last token) that
// cannot match reins's own traffic or the server's: its first token is a name (not a wildcard,
// not beginning with '$' or '_INBOX'), and neither of its first two tokens is "reins" (the
// subjects of reins in the default namespace are reins.>, in namespace NS NS.reins.>).
func CheckSubject(subj string) error {
	switch {
	case subj == "":
		return errors.New("the subject is empty")
	case len(subj) > MaxSubjectLen:
		return fmt.Errorf("the subject is %d bytes long, more than %d", len(subj), MaxSubjectLen)
	}
	toks := strings.Split(subj, ".")
	for i, tok := range toks {
		switch {
		case tok == "":
			return fmt.Errorf("the subject %q has an empty token (two dots in a row, or a dot at an end)", subj)
		case tok == ">" && i != len(toks)-1:
			return fmt.Errorf("the subject %q has '>' before its last token: '>' matches the rest and must come last", subj)
		case tok != "*" && tok != ">" && strings.ContainsAny(tok, "*>"):
			return fmt.Errorf("the subject %q has a wildcard inside the token %q: '*' and '>' stand for whole tokens", subj, tok)
		}
		for _, r := range tok {
			if r <= ' ' || r == 0x7f {
				return fmt.Errorf("the subject %q has whitespace or a control character", subj)
			}
		}
	}
	first := toks[0]
	switch {
	case first == "*" || first == ">":
		return fmt.Errorf("the subject %q begins with a wildcard, which would match the subjects of reins and of the NATS server: %w", subj, ErrReservedSubject)
	case strings.HasPrefix(first, "$") || first == "_INBOX" || strings.HasPrefix(first, "_INBOX"):
		return fmt.Errorf("the subject %q is the NATS server's ($JS, $KV, $SYS, _INBOX, ...): %w", subj, ErrReservedSubject)
	case first == "reins" || len(toks) > 1 && toks[1] == "reins":
		return fmt.Errorf("the subject %q is one of reins's own (reins.> and NAMESPACE.reins.>): %w", subj, ErrReservedSubject)
	}
	return nil
}

// ReservedSubject reports whether a concrete subject, one a message was published on, is one of
// reins's or the server's (see [CheckSubject]): a message on it never starts a run, whatever
// pattern matched it.
func ReservedSubject(subj string) bool {
	first, rest, _ := strings.Cut(subj, ".")
	second, _, _ := strings.Cut(rest, ".")
	return first == "reins" || second == "reins" || strings.HasPrefix(first, "$") || strings.HasPrefix(first, "_INBOX")
}

// SubjectWithin reports whether every subject pattern p matches is also matched by pattern
// allowed (both valid subjects): "orders.created" and "orders.*" are within "orders.>", and
// "orders.>" is not within "orders.*".
func SubjectWithin(p, allowed string) bool {
	pt, at := strings.Split(p, "."), strings.Split(allowed, ".")
	for i, a := range at {
		if a == ">" {
			return len(pt) > i
		}
		if i >= len(pt) {
			return false
		}
		switch {
		case a == "*":
			if pt[i] == ">" {
				return false
			}
		case pt[i] != a:
			return false
		}
	}
	return len(pt) == len(at)
}

// WebhookNameOK reports whether s can name a webhook: 1 to 64 characters of [a-z0-9_-], the
// last token of its URL path.
func WebhookNameOK(s string) bool { return len(s) <= 64 && valNameOK(s) }
