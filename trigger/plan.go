package trigger

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"
	"time"

	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/workflow"
)

// State is what a schedule trigger keeps between two decisions, in the triggers bucket under
// its key ([ScheduleKey]).
type State struct {
	// Last is the latest due time decided: started, skipped or queued. Due times after it are
	// still to decide. A trigger seen for the first time starts from the time it was seen:
	// registering a workflow does not start runs for due times before it.
	Last time.Time `json:"last"`
	// Queued is a due time waiting for the previous run to end (overlap queue); zero for none.
	Queued time.Time `json:"queued,omitzero"`
	// Run is the id of the latest run the trigger started, whose end overlap waits for.
	Run string `json:"run,omitempty"`
	// Started is when Run was started (the clock of the engine that started it): a run whose
	// record is not there yet counts as running for a while after it (StartingFor).
	Started time.Time `json:"started,omitzero"`
}

// Grace is how late a due time may be decided and still be on time: a due time later than
// that was missed (no engine ran), and only catch_up of those start a run.
const Grace = time.Minute

// MaxScan bounds the due times one Plan walks through: after a downtime longer than that many
// due times, Plan moves Last forward and is called again (More).
const MaxScan = 1 << 16

// Decision is what Plan decided.
type Decision struct {
	// State is the state to save (with compare-and-set) once the runs of Fire were started.
	State State
	// Fire are the due times that start a run now, in order.
	Fire []time.Time
	// Skipped are the due times that start no run: missed beyond catch_up, or overlapping the
	// previous run (skip, or a queued one replaced by a later one).
	Skipped int
	// More: Plan stopped after MaxScan due times; call it again with State.
	More bool
}

// Plan decides which due times of the schedule trigger t start a run at now. st is the state
// saved before (zero: the trigger is new), running whether the run st.Run still runs (read by
// the shell: ignored by overlap allow).
//
// The rules (docs/workflows.md, "Triggers"):
//   - A new trigger starts no run: its state begins at now.
//   - A queued due time starts a run as soon as the previous run no longer runs.
//   - The due times in (Last, now] are decided in order. One at most Grace late is on time;
//     of those later (missed while no engine ran), only the catch_up most recent start a run.
//   - Overlap: allow starts every one; skip starts one only when no previous run runs (the
//     one it starts then runs); queue keeps the latest overlapping one waiting, replacing one
//     that waited.
//   - Last becomes the latest due time decided, whatever became of it.
func Plan(s *workflow.Schedule, t workflow.Trigger, st State, running bool, now time.Time) Decision {
	now = now.UTC()
	if st.Last.IsZero() {
		return Decision{State: State{Last: now}}
	}
	d := Decision{State: st}
	if t.Overlap == workflow.OverlapAllow {
		running = false
	}
	if !st.Queued.IsZero() && !running {
		d.Fire = append(d.Fire, st.Queued)
		d.State.Queued = time.Time{}
		running = t.Overlap != workflow.OverlapAllow
	}
	due := make([]time.Time, 0, 4)
	late := 0
	for n := s.Next(st.Last); !n.IsZero() && !n.After(now); n = s.Next(n) {
		if len(due) == MaxScan {
			// All of these are older than the ones after: none is among the most recent.
			d.State.Last = due[len(due)-1]
			d.Skipped += len(due)
			d.More = true
			return d
		}
		due = append(due, n)
		if now.Sub(n) > Grace {
			late++
		}
	}
	if len(due) == 0 {
		return d
	}
	d.State.Last = due[len(due)-1]
	keepLate := min(late, t.CatchUpOr())
	for i, n := range due {
		if i < late-keepLate {
			d.Skipped++ // missed, beyond catch_up
			continue
		}
		switch {
		case !running || t.Overlap == workflow.OverlapAllow:
			d.Fire = append(d.Fire, n)
			running = t.Overlap != workflow.OverlapAllow
		case t.Overlap == workflow.OverlapQueue:
			if !d.State.Queued.IsZero() {
				d.Skipped++
			}
			d.State.Queued = n
		default:
			d.Skipped++
		}
	}
	return d
}

// Next is when the shell decides trigger t again: its next due time after st.Last; the zero
// time when there is none.
func Next(s *workflow.Schedule, st State) time.Time {
	if st.Last.IsZero() {
		return time.Time{}
	}
	return s.Next(st.Last)
}

// StartingFor is how long a run just started counts as running while its record is not there:
// the engine saves the first record of a run within moments of its start; a record missing
// longer than that was pruned, and the run no longer runs.
const StartingFor = 5 * time.Minute

// runIDEncoding writes run ids' hashes in lower case letters and digits.
var runIDEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// RunID is the id of the run that trigger of workflow starts for key (a schedule's due time in
// RFC 3339, a message's id, a webhook's delivery id): "t-", the trigger's name (its first 24
// characters), "-", and 20 characters of a hash of the four. Every process derives the same id
// for the same due time, message or delivery, so a start made twice starts one run (a start of
// a run that exists is a no-op, within JetStream's duplicate window and beyond). The id is in
// the server's space ([wire.ServerRunID]): the engine takes its start only from the engine's own
// subject, where the Service sends it, never from a person who would take it first.
func RunID(kind, wf, trigger, key string) string {
	h := sha256.Sum256([]byte(kind + "\x00" + wf + "\x00" + trigger + "\x00" + key))
	name := trigger
	if len(name) > 24 {
		name = name[:24]
	}
	return wire.TriggerRunIDPrefix + strings.TrimRight(name, "-_") + "-" + runIDEncoding.EncodeToString(h[:])[:20]
}

// DueKey is the key of [RunID] for a schedule's due time.
func DueKey(due time.Time) string { return due.UTC().Format(time.RFC3339) }

// ScheduleKey is the key of a schedule trigger's State in the triggers bucket:
// "schedule.WORKFLOW.TRIGGER".
func ScheduleKey(wf, trigger string) string { return "schedule." + wf + "." + trigger }
