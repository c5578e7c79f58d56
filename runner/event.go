package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/outbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/telemetry"
	"github.com/reins-run/reins/workflow"
)

// shard decides the events of the runs hashed to it, one at a time.
type shard struct {
	in    chan *heldEvent
	cache *runCache // running runs by id, least recently used out first (trim)
	saves saveQueue // the runs whose decisions wait for a save
	// single lists the runs whose decisions are saved one at a time: a coalesced save of
	// theirs was too large.
	single map[string]bool
}

// entry is a run as last decided: the record, the revision of its last save, its bundle, and
// the events decided since that save (pending), acknowledged once a save covers them.
type entry struct {
	rec     *engine.Record
	rev     uint64
	bundle  *workflow.Bundle
	pending []decided
}

// decided is an event whose decision waits for a save.
type decided struct {
	m  *heldEvent
	ev *protocol.Event
	// spans are the spans of what the decision ended, emitted once it is saved (tracing on).
	spans []telemetry.Ended
}

// outcome is what becomes of an event message.
type outcome int

const (
	ack    outcome = iota // decided (or nothing to decide): acknowledge
	hold                  // cannot be decided yet: deliver again after a delay
	retry                 // an error: deliver again after a delay
	drop                  // can never be decided: terminate
	later                 // decided, and settled by the save that covers it (never settled as such)
	refuse                // its sender may not send it: terminate, counted apart
	await                 // a sub-run's start whose parent's save is due: deliver again soon
)

// errReload asks for the event to be decided again on the saved state: the cached copy is stale.
var errReload = errors.New("the cached run is stale")

// dropError marks an error that no redelivery can fix.
type dropError struct{ err error }

func (d *dropError) Error() string { return d.err.Error() }
func (d *dropError) Unwrap() error { return d.err }

func permanent(err error) error { return &dropError{err} }

// events keeps the events the engine decoded, for the next once settled ([Engine.settle]):
// an event is read only until its message is settled (the engine decides on a copy), and it
// was an allocation of 512 bytes at every iteration.
var events = sync.Pool{New: func() any { return new(protocol.Event) }}

// keepEvent hands ev back to events, emptied, so that the pool holds on to nothing the event
// held (its output, its records): the state decided from it may hold them, and the next
// decoding into ev starts from an empty event anyway (wire.DecodeEventInto).
func keepEvent(ev *protocol.Event) {
	if ev != nil {
		*ev = protocol.Event{}
		events.Put(ev)
	}
}

// handle decides one event message and settles it.
func (e *Engine) handle(ctx context.Context, sh *shard, m *heldEvent) {
	ev := events.Get().(*protocol.Event)
	err := wire.DecodeEventInto(m.Data(), ev)
	if err != nil {
		keepEvent(ev)
		ev = nil
	} else {
		err = e.admitSubject(m.Subject(), ev)
	}
	switch {
	case isRefusal(err):
		e.log.Warn("runner: an event was refused", eventAttrs(ev, "subject", m.Subject(), "err", err)...)
		e.settle(m, refuse, ev)
		return
	case err != nil:
		e.log.Warn("runner: a malformed event was dropped", "subject", m.Subject(), "err", err)
		e.settle(m, drop, ev) // ev is nil when the message is not an event at all
		return
	}
	checkAnswerVersion(ev)
	e.boundOutput(ev)
	out, err := e.takeValues(ctx, ev)
	if err == nil {
		out, err = e.process(ctx, sh, ev, m, delivered(m))
	}
	if err == nil && (out == ack || out == later) && e.log.Enabled(ctx, slog.LevelDebug) {
		e.log.DebugContext(ctx, "runner: event decided", eventAttrs(ev)...)
	}
	if out == later {
		return
	}
	if err != nil {
		var d *dropError
		switch {
		case isRefusal(err):
			out = refuse
			e.log.WarnContext(ctx, "runner: an event was refused", eventAttrs(ev, "subject", m.Subject(), "err", err)...)
		case errors.As(err, &d):
			out = drop
			e.log.ErrorContext(ctx, "runner: an event that cannot be decided was dropped", eventAttrs(ev, "err", err)...)
		default:
			out = retry
			e.log.WarnContext(ctx, "runner: an event will be decided again", eventAttrs(ev, "err", err)...)
		}
	}
	e.settle(m, out, ev)
}

// isRefusal reports whether err is a refusal of the event's sender. The target errors.As
// writes to is made only for an error: on the path of every event it was an allocation.
func isRefusal(err error) bool {
	if err == nil {
		return false
	}
	var ref *refusal
	return errors.As(err, &ref)
}

// eventAttrs are the log attributes of ev, the run's id, the event's type and, for an event
// about a step, the step and iteration, followed by more.
func eventAttrs(ev *protocol.Event, more ...any) []any {
	as := make([]any, 0, 8+len(more))
	as = append(as, "run_id", ev.RunID, "type", ev.Type)
	if ev.Step != "" {
		as = append(as, "step", protocol.StepKey(ev.Step, ev.Item), "iteration", ev.Iteration)
	}
	return append(as, more...)
}

// refusal is the error of an event its sender may not send (on the subject it came on): one
// sentence naming the sender and what it may not do. It is never decided again.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

func refused(format string, args ...any) error { return &refusal{fmt.Sprintf(format, args...)} }

// admitSubject checks that ev came on a subject its sender may send it on, and takes who sent
// it from the subject, never from the message (wire.Sender): a worker's answer on the run's
// subject; a person's start, cancel, decision, resume or signal on the subject of its
// principal (natsbox.PrincipalSubject), which the server lets only that principal publish on;
// what only the engine makes on the engine's subject (natsbox.Names.EngineSubject), which the
// server lets only the engine's identity and admins publish on. It sets what the decision
// needs of the sender: By, and the Roles of whom the approvers are checked against. An event
// on a subject its sender may not send it on is a *refusal.
func (e *Engine) admitSubject(subject string, ev *protocol.Event) error {
	if err := natsbox.CheckToken(ev.RunID); err != nil {
		return fmt.Errorf("the run id of the event cannot name a run: %w", err)
	}
	ev.Roles, ev.Refused = nil, nil
	if ev.Type == protocol.EvStateTooLarge {
		return fmt.Errorf("a %s event for run %s came in a message: only the engine makes it", ev.Type, ev.RunID)
	}
	runID, kind, principal, ok := e.names.ParseEventSubject(subject)
	if !ok || !wire.Sender(runID, kind, principal, ev) {
		return fmt.Errorf("the event of run %s came on subject %s", ev.RunID, subject)
	}
	if err := wire.CheckSender(kind, principal, ev); err != nil {
		return &refusal{err.Error()}
	}
	switch kind {
	case "":
		return nil
	case natsbox.EngineKind:
		switch {
		case ev.Type == protocol.EvStart && ev.By != "":
			ev.Roles = e.rolesOf(ev.By) // a trigger's run, started as the principal that registered it
		case ev.Type != protocol.EvStart:
			// The engine's own events (the cancel of a sub-run) act with the server's authority.
			ev.Roles = []string{natsbox.RoleAdmin}
		}
		return nil
	}
	who := principal
	if ev.OnBehalfOf != "" {
		if !slices.Contains(e.rolesOf(principal), natsbox.RoleAdmin) {
			return refused("principal %s is not an admin and may not act on behalf of %s (run %s)", principal, ev.OnBehalfOf, ev.RunID)
		}
		who = ev.OnBehalfOf
	}
	ev.Roles = e.rolesOf(who)
	return nil
}

// boundOutput turns an answer whose output passes Config.MaxOutputBytes into a permanent
// failure with stop reason output_too_large: the output is not kept (nor read, when it is
// stored by reference), and the step's edges see why it stopped.
func (e *Engine) boundOutput(ev *protocol.Event) {
	n := wire.ValueSize(ev.Output)
	if e.maxOutput <= 0 || n <= e.maxOutput || !answersWithOutput(ev.Type) {
		return
	}
	failAnswer(ev, StopOutputTooLarge, fmt.Sprintf("the step's output is %d bytes, more than the server's max_output_bytes of %d", n, e.maxOutput))
}

// StopProtocolVersion is the stop reason of a step whose worker answered in a protocol version
// this engine does not speak.
const StopProtocolVersion = "protocol_version"

// checkAnswerVersion turns an answer in a protocol version this engine does not speak into a
// permanent failure of its step naming both versions: what such an answer means is unknown to
// this engine, and the worker would answer the same way again. A worker answers in the version
// of its task (docs/protocol.md, Versions), so only a worker that breaks that rule gets here.
func checkAnswerVersion(ev *protocol.Event) {
	v := protocol.VersionOf(ev.Protocol)
	if v == protocol.Version || !isAnswer(ev.Type) {
		return
	}
	failAnswer(ev, StopProtocolVersion, fmt.Sprintf("the worker answered in reins protocol version %d, and this engine speaks version %d: a worker must answer in its task's version", v, protocol.Version))
	ev.Protocol = protocol.Version
}

// isAnswer reports whether an event of type typ is a worker's answer to a task.
func isAnswer(typ protocol.EventType) bool {
	return answersWithOutput(typ) || typ == protocol.EvFailed || typ == protocol.EvTimedOut
}

// answersWithOutput reports whether an event of type typ answers a task with an output.
func answersWithOutput(typ protocol.EventType) bool {
	return typ == protocol.EvCompleted || typ == protocol.EvContinued || typ == protocol.EvWaiting
}

// failAnswer turns the answer ev into a permanent failure of its step, without its output.
func failAnswer(ev *protocol.Event, stopReason, why string) {
	ev.Type, ev.Output, ev.Label, ev.Pending, ev.Permanent = protocol.EvFailed, nil, "", nil, true
	ev.StopReason, ev.Error = stopReason, why
}

// StopValueUnreadable is the stop reason of a step whose answer's output, stored by reference,
// cannot be read back ([wire.ErrValue]): deleted, changed, or larger than [Config.MaxValueBytes].
const StopValueUnreadable = "value_unreadable"

// takeValues reads back the values of ev stored by reference. One that can never be read ends
// what it was for with one sentence instead of holding the run: a start is refused
// (E_VALUE_UNREADABLE), an answer fails its step for good (stop reason value_unreadable), and
// anything else (a person's input, a signal's data) is dropped. A failing store is tried again.
func (e *Engine) takeValues(ctx context.Context, ev *protocol.Event) (outcome, error) {
	err := e.values.InEvent(ctx, ev)
	switch {
	case err == nil:
		return ack, nil
	case !errors.Is(err, wire.ErrValue):
		return retry, fmt.Errorf("read the values of the event: %w", err)
	case ev.Type == protocol.EvStart:
		ev.Input = json.RawMessage("null")
		ev.Refused = &protocol.RunError{Code: protocol.CodeValueUnreadable, Message: fmt.Sprintf("the run's input cannot be read: %v", err)}
	case answersWithOutput(ev.Type):
		failAnswer(ev, StopValueUnreadable, fmt.Sprintf("the step's output cannot be read: %v", err))
	default:
		return drop, permanent(fmt.Errorf("a %s event: %w", ev.Type, err))
	}
	e.log.WarnContext(ctx, "runner: a value of an event cannot be read", eventAttrs(ev, "err", err)...)
	return ack, e.values.InEvent(ctx, ev) // what is left of the event
}

// rolesOf returns the roles of principal: Config.Roles's, or with none the data directory's
// admin's for "admin".
func (e *Engine) rolesOf(principal string) []string {
	if e.roles != nil {
		return e.roles(principal)
	}
	if principal == natsbox.RoleAdmin {
		return []string{natsbox.RoleAdmin}
	}
	return nil
}

func delivered(m jetstream.Msg) uint64 {
	d, ok := natsbox.DeliveryOf(m.Reply()) // Metadata, without allocating it
	if !ok {
		return 1
	}
	return d.NumDelivered
}

// settle acknowledges m, or gives it back, or ends it, as out says, and hands ev, the event it
// carried (nil: none), back to events: the caller must not read it after.
func (e *Engine) settle(m *heldEvent, out outcome, ev *protocol.Event) {
	var err error
	switch out {
	case ack:
		err = m.Ack()
	case hold:
		e.stats.held.Add(1)
		err = m.NakWithDelay(holdFor(delivered(m)))
	case await:
		e.stats.held.Add(1)
		err = m.NakWithDelay(awaitFor(delivered(m)))
	case retry:
		err = m.NakWithDelay(retryDelay)
	case drop:
		e.stats.dropped.Add(1)
		err = m.Term()
	case refuse:
		e.stats.refused.Add(1)
		err = m.Term()
	}
	if err != nil {
		e.log.Debug("runner: settle an event", "subject", m.Subject(), "err", err)
		e.flight.failed(int(m.part))
	}
	e.flight.done(m)
	if e.observe != nil {
		e.observe(out, observerCopy(ev))
	}
	keepEvent(ev)
}

// observerCopy is a copy of ev for the observe hook, which may keep it: ev goes back to events.
func observerCopy(ev *protocol.Event) *protocol.Event {
	if ev == nil {
		return nil
	}
	c := *ev
	return &c
}

// holdFor is the delay of an event held back for the n-th time: 250ms, doubling after the
// fourth delivery, at most maxHoldDelay.
func holdFor(n uint64) time.Duration { return doubling(holdDelay, 4, n) }

// awaitFor is the delay of a sub-run's start held back for the n-th time while its parent's
// record does not show it: the parent saves within moments of publishing the start, so
// awaitDelay, doubling, at most maxHoldDelay.
func awaitFor(n uint64) time.Duration { return doubling(awaitDelay, 1, n) }

// doubling is base doubled for each delivery after the from-th up to the n-th, at most
// maxHoldDelay.
func doubling(base time.Duration, from, n uint64) time.Duration {
	d := base
	for i := from; i < n && d < maxHoldDelay; i++ {
		d *= 2
	}
	return min(d, maxHoldDelay)
}

// process decides ev, the event of m delivered for the n-th time, again on reloaded state as
// long as the cached state was stale.
func (e *Engine) process(ctx context.Context, sh *shard, ev *protocol.Event, m *heldEvent, n uint64) (outcome, error) {
	for range maxReloads {
		out, err := e.decide(ctx, sh, ev, m, n)
		if !errors.Is(err, errReload) {
			return out, err
		}
		e.stats.reloads.Add(1)
		e.evict(ctx, sh, ev.RunID)
	}
	return retry, fmt.Errorf("run %s changed under %d decisions of the event in a row", ev.RunID, maxReloads)
}

// decide decides ev on the run's state (cached, or read when fresh) and carries it out.
func (e *Engine) decide(ctx context.Context, sh *shard, ev *protocol.Event, m *heldEvent, n uint64) (outcome, error) {
	ent, fresh, err := e.load(ctx, sh, ev.RunID)
	if err != nil {
		return retry, err
	}
	if ev.Type == protocol.EvStart {
		if ent != nil {
			e.stats.acked.Add(1)
			return ack, nil // started before: a duplicate
		}
		if ev.Parent != nil {
			if out, err := e.awaited(ctx, ev, n); out != ack || err != nil {
				return out, err
			}
		}
		return e.start(ctx, sh, decided{m: m, ev: ev})
	}
	if ent == nil {
		if n >= missingDeliveries {
			return drop, permanent(fmt.Errorf("run %s has no record after %d deliveries of the event", ev.RunID, n))
		}
		return hold, nil
	}
	def, run := ent.bundle.Definition, ent.rec.Run
	if ev.Type == protocol.EvGranted {
		holds, err := e.takeGrant(ctx, ev.RunID)
		if err != nil {
			return retry, err
		}
		if !holds {
			e.log.WarnContext(ctx, "runner: a granted event for a run that holds no concurrency slot changed nothing", eventAttrs(ev)...)
			return ack, nil
		}
	}
	if engine.Ahead(def, run, *ev) {
		if !fresh {
			return retry, errReload
		}
		return hold, nil
	}
	next, cmds, err := engine.Decide(def, run, *ev)
	if err != nil {
		return drop, permanent(err)
	}
	if len(cmds) == 0 && reflect.DeepEqual(next, run) {
		if !fresh {
			return retry, errReload // make sure against the saved state before dropping nothing
		}
		e.stats.acked.Add(1)
		if ev.Type == protocol.EvChildFinished && n == 1 && !next.Finished() {
			// Not a redelivery: the end of a sub-run the run does not await (engine.Decide
			// takes only the one its step or call has in flight, by Child).
			e.log.WarnContext(ctx, "runner: a child_finished event for a sub-run the run does not await changed nothing", eventAttrs(ev, "child", ev.Child)...)
		}
		if next.Finished() && (n > 1 || def.Concurrency != nil) {
			// Delivered again: the notifications of the end may not have gone out. A run with a
			// concurrency key is released again whatever the delivery count: a partition taken
			// over delivers again from its acknowledged floor, counting from 1.
			if err := e.finished(ctx, ev.At, ent); err != nil {
				return retry, err
			}
		}
		return ack, nil
	}
	return e.save(ctx, sh, decided{m: m, ev: ev}, ent, newEntry(engine.Record{Run: next, Parent: ent.rec.Parent}, ent.bundle), cmds)
}

// newEntry is the entry of rec and bundle, the record in the same allocation: every decision
// makes one.
func newEntry(rec engine.Record, bundle *workflow.Bundle) *entry {
	both := &struct {
		entry
		rec engine.Record
	}{rec: rec}
	both.entry = entry{rec: &both.rec, bundle: bundle}
	return &both.entry
}

// awaited decides whether the start ev of a sub-run (Parent set: it came on the engine's
// subject) may begin: only when the parent it names exists, goes on, and has in flight a
// sub-run of that id at that step, item, activation, iteration and call
// (engine.AwaitsChild), so that no run becomes another's child but by its parent's own
// decision. The parent's engine publishes the start before it saves the state that started
// it: a parent whose record does not show the sub-run yet holds the start (hold, the n-th
// delivery) for up to missingDeliveries deliveries (parentDeliveries); then, or when the parent ended, the start
// is refused (nothing is started, nobody is told).
func (e *Engine) awaited(ctx context.Context, ev *protocol.Event, n uint64) (outcome, error) {
	p := ev.Parent
	rec, def, err := e.read(ctx, p.RunID)
	if err != nil {
		return retry, err
	}
	switch {
	case rec != nil && engine.AwaitsChild(def, rec.Run, ev.RunID, *p):
		return ack, nil
	case rec != nil && rec.Run.Finished():
		return refuse, refused("run %s was not started: its parent run %s ended %s", ev.RunID, p.RunID, rec.Run.Status)
	case n < e.parentDeliveries:
		return await, nil
	case rec == nil:
		return refuse, refused("run %s was not started: its parent run %s has no record after %d deliveries of the start", ev.RunID, p.RunID, n)
	}
	return refuse, refused("run %s was not started: its parent run %s has no such sub-run in flight at step %s after %d deliveries of the start",
		ev.RunID, p.RunID, protocol.StepKey(p.Step, p.Item), n)
}

// read returns the saved record of run id and its definition, nil when there is none: what a
// decision about another run (its sub-run) reads of it, without caching it (it may be
// another shard's, or another engine's).
func (e *Engine) read(ctx context.Context, id string) (*engine.Record, *workflow.Definition, error) {
	rec, _, b, err := e.fetch(ctx, id)
	if rec == nil || err != nil {
		if errors.Is(err, jetstream.ErrInvalidKey) {
			err = nil // no run can have such an id: none
		}
		return nil, nil, err
	}
	return rec, b.Definition, nil
}

// fetch reads the saved record of run runID, its entry in the bucket and its bundle; a nil record when
// there is none. A record that does not decode, or names a bundle that is not stored, is a
// permanent error; a store that does not answer within recordWait, one to try again.
func (e *Engine) fetch(ctx context.Context, runID string) (*engine.Record, jetstream.KeyValueEntry, *workflow.Bundle, error) {
	// Asked again after an attempt without an answer: a bucket whose leader died answers only
	// a request sent to the leader elected after it (natsbox.Retry).
	var kve jetstream.KeyValueEntry
	rctx, cancel := context.WithTimeout(ctx, recordWait)
	err := natsbox.Retry(rctx, func(actx context.Context) (err error) {
		kve, err = e.runs.Get(actx, runID)
		return err
	})
	cancel()
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, nil, nil, nil
	case errors.Is(err, jetstream.ErrInvalidKey):
		return nil, nil, nil, permanent(fmt.Errorf("run id %q: %w", runID, err))
	case err != nil:
		return nil, nil, nil, fmt.Errorf("read run %s: %w", runID, err)
	}
	rec, err := runstore.DecodeRecord(kve)
	if err != nil {
		return nil, nil, nil, permanent(err)
	}
	b, err := e.store.Get(ctx, rec.Run.Hash)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, wire.ErrMalformed) {
			err = permanent(err)
		}
		return nil, nil, nil, fmt.Errorf("run %s: %w", runID, err)
	}
	return rec, kve, b, nil
}

// start begins the run of a start event.
func (e *Engine) start(ctx context.Context, sh *shard, d decided) (outcome, error) {
	ev := d.ev
	b, err := e.store.Get(ctx, ev.Workflow)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) || errors.Is(err, wire.ErrMalformed) {
			return e.startFailed(ctx, ev, fmt.Sprintf("its workflow %.12s is not stored", ev.Workflow), err)
		}
		return retry, err
	}
	start := *ev
	if e.admit != nil {
		// Every start, a sub-run's too: a parent that names a workflow file or an agent's
		// workflow the operator refuses gets a sub-run that fails at once with the refusal,
		// which its parent learns from child_finished.
		defs, err := e.workflowsOf(ctx, b)
		if err != nil {
			return retry, err
		}
		start.Refused = e.admit(ctx, defs, ev.Input)
	}
	run, cmds, err := engine.Decide(b.Definition, e.newRun(ev.RunID), start)
	if err != nil {
		return e.startFailed(ctx, ev, err.Error(), err)
	}
	if run, cmds, err = e.acquireAtStart(ctx, b.Definition, run, cmds, start); err != nil {
		return retry, err
	}
	return e.save(ctx, sh, d, nil, &entry{rec: &engine.Record{Run: run, Parent: ev.Parent}, bundle: b}, cmds)
}

// workflowsOf returns the definition of b and of every sub-workflow it names (the workflows of
// its agent tools included), transitively, each once: what a run of b may run.
func (e *Engine) workflowsOf(ctx context.Context, b *workflow.Bundle) ([]*workflow.Definition, error) {
	defs := []*workflow.Definition{b.Definition}
	seen := map[string]bool{}
	queue := []*workflow.Bundle{b}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		refs := map[string]string{}
		for file, h := range cur.Workflows {
			refs["sub-workflow "+file] = h
		}
		for step, h := range cur.Agents {
			refs["the workflow of agent tool step "+step] = h
		}
		for _, what := range slices.Sorted(maps.Keys(refs)) {
			h := refs[what]
			if seen[h] {
				continue
			}
			seen[h] = true
			sub, err := e.store.Get(ctx, h)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			defs = append(defs, sub.Definition)
			queue = append(queue, sub)
		}
	}
	return defs, nil
}

// startFailed drops a start event that cannot start a run; a sub-run's parent learns that its
// sub-run failed.
func (e *Engine) startFailed(ctx context.Context, ev *protocol.Event, why string, err error) (outcome, error) {
	if p := ev.Parent; p != nil {
		m, merr := outbox.EventMsg(e.names, outbox.CouldNotStart(p, ev.RunID, ev.At, why), ev.RunID)
		if merr == nil {
			if perr := e.out.Publish(ctx, []*nats.Msg{m}); perr != nil {
				return retry, perr
			}
		}
	}
	return drop, permanent(fmt.Errorf("run %s cannot start: %w", ev.RunID, err))
}

// save carries out the commands of a decision (the decision of d), then saves the new state
// with compare-and-set (old nil: create the record) and does what comes after the save. A
// decision that only dispatches the next task of a running run may instead wait for a later
// save (deferSave): it returns later, and the save that covers it acknowledges its event.
func (e *Engine) save(ctx context.Context, sh *shard, d decided, old, next *entry, cmds []engine.Command) (outcome, error) {
	id := next.rec.Run.ID
	d.spans = spansOf(d, old, next)
	deferred := e.deferSave(sh, d.ev, old, next, cmds)
	var data []byte
	if !deferred {
		// Encoded before the commands go out, so that a state too large to save is decided
		// again before anything of it happens.
		var err error
		if data, err = e.encode(ctx, next); err != nil {
			var big *runstore.TooLargeError
			if !errors.As(err, &big) {
				return retry, err // handle drops a permanent error
			}
			if old == nil || len(old.pending) == 0 {
				return e.tooLarge(ctx, sh, d, old, next, cmds, big)
			}
			e.unsaved(sh, id, old, true)
			return retry, fmt.Errorf("save run %s: %w", id, err)
		}
	}
	if !deferred {
		if err := e.indexBefore(ctx, old, next); err != nil {
			return retry, err
		}
	}
	if err := e.carryOut(ctx, d.ev.At, next, cmds); err != nil {
		return retry, err
	}
	if deferred {
		e.stats.decided.Add(1)
		e.count(next.bundle.Definition, runOf(old), next.rec.Run, d.ev.At)
		next.rev, next.pending, old.pending = old.rev, append(old.pending, d), nil
		sh.cache.put(id, next)
		if len(next.pending) == 1 {
			sh.saves.add(id, time.Now().Add(e.saveWindow))
		}
		// A watch is armed before its save: it fires a tick long after the window, and an
		// engine that crashes meanwhile re-arms it from the saved state (engine.Timers).
		e.armSchedules(id, cmds)
		return later, nil
	}
	var rev uint64
	var pending []decided
	if old != nil {
		rev, pending = old.rev, old.pending
	}
	var err error
	if next.rev, err = e.put(ctx, id, data, old == nil, rev); err != nil {
		if len(pending) > 0 {
			e.unsaved(sh, id, old, false)
		}
		if errors.Is(err, errReload) {
			return retry, err
		}
		return retry, fmt.Errorf("save run %s: %w", id, err)
	}
	if old != nil {
		old.pending = nil
	}
	e.stats.decided.Add(1)
	e.count(next.bundle.Definition, runOf(old), next.rec.Run, d.ev.At)
	e.settleAll(pending, ack)
	emitSpans(d)
	e.indexAfter(ctx, old, next)
	if next.rec.Run.Finished() {
		sh.cache.remove(id)
		delete(sh.single, id)
		e.timers.cancelRun(id)
		if err := e.finished(ctx, d.ev.At, next); err != nil {
			return retry, err
		}
		return ack, nil
	}
	sh.cache.put(id, next)
	e.armSchedules(id, cmds)
	return ack, nil
}

// runOf is the run of ent, nil for none.
func runOf(ent *entry) *engine.Run {
	if ent == nil {
		return nil
	}
	return ent.rec.Run
}

// unsaved gives back to JetStream the events whose decisions wait in old for a save that did
// not happen, to be decided again on the saved state; tooLarge (the save would have been too
// large) makes the run's decisions saved one at a time from now on, so that the one that makes
// it too large is found.
func (e *Engine) unsaved(sh *shard, id string, old *entry, tooLarge bool) {
	pending := old.pending
	old.pending = nil
	sh.cache.remove(id)
	if tooLarge {
		sh.single[id] = true
	}
	e.settleAll(pending, retry)
}

// encode returns the record of ent as it is saved (runstore.Saver.Encode): the error is a
// *runstore.TooLargeError when the record cannot be saved, permanent when it cannot be encoded, and
// the store's (worth trying again) otherwise.
func (e *Engine) encode(ctx context.Context, ent *entry) ([]byte, error) {
	data, err := e.saver.Encode(ctx, ent.rec)
	if errors.Is(err, runstore.ErrUnencodable) {
		return nil, permanent(err)
	}
	return data, err
}

// put saves the record data of run id: creates it, or replaces revision rev.
func (e *Engine) put(ctx context.Context, id string, data []byte, create bool, rev uint64) (uint64, error) {
	e.fault(id)
	// Bounded: a save whose acknowledgement was lost (the server restarted between the request
	// and its reply) would otherwise wait forever and stall every run of the shard. After the
	// timeout the event is decided again, and compare-and-set tells a save that did land.
	ctx, cancel := context.WithTimeout(ctx, recordWait)
	defer cancel()
	rev, err := e.saver.Put(ctx, id, data, create, rev)
	switch {
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		e.stats.conflicts.Add(1)
		return 0, errReload
	case err != nil:
		return 0, fmt.Errorf("%d bytes: %w", len(data), err)
	}
	e.stats.saves.Add(1)
	return rev, nil
}

// load returns the run's entry, from the cache or else from the bucket (fresh); nil when the run
// has no record. A running run read from the bucket is cached and its timers are armed.
func (e *Engine) load(ctx context.Context, sh *shard, runID string) (ent *entry, fresh bool, err error) {
	if ent := sh.cache.get(runID); ent != nil {
		return ent, false, nil
	}
	rec, kve, b, err := e.fetch(ctx, runID)
	if rec == nil || err != nil {
		return nil, true, err
	}
	if err := runstore.InRun(ctx, e.values, rec.Run); err != nil {
		if errors.Is(err, wire.ErrValue) {
			err = permanent(err)
		}
		return nil, true, fmt.Errorf("run %s: %w", runID, err)
	}
	ent = &entry{rec: rec, rev: kve.Revision(), bundle: b}
	if !rec.Run.Finished() {
		sh.cache.put(runID, ent)
		e.rearmRun(b.Definition, rec.Run, kve)
	}
	return ent, true, nil
}

// recordWait bounds a read or a save of a run's record: as long as the publishes of a decision
// may take (outbox.PublishTimeout), so that a bucket electing a leader (4 to 9 s in
// nats-server) is waited out rather than failed.
const recordWait = outbox.PublishTimeout

// tooLarge decides again an event whose decision made a state too large to save, so that the
// run goes on or ends with a clear error instead of retrying the save forever: an answer whose
// output made it too large fails its step for good with stop reason output_too_large (an edge
// may route on it); a start whose input is too large ends the run failed (E_INPUT_TOO_LARGE)
// without keeping the input; any other event fails the run (E_STATE_TOO_LARGE). The commands of
// the first decision went out already: their answers find the attempt they answer over. A run
// that ended so and whose state is still too large is saved without its values (inputs,
// outputs, rendered prompts): it ends, whatever it held.
func (e *Engine) tooLarge(ctx context.Context, sh *shard, d decided, old, next *entry, cmds []engine.Command, big *runstore.TooLargeError) (outcome, error) {
	ev := *d.ev
	def := next.bundle.Definition
	switch {
	case ev.Type == protocol.EvStateTooLarge || ev.Refused != nil:
		if run, dropped := runstore.DropValues(next.rec.Run); run.Finished() && dropped {
			e.log.WarnContext(ctx, "runner: a run ended with a state too large to save: saved without its values", eventAttrs(&ev, "err", big)...)
			if run.Error != nil {
				why := *run.Error // the copy shares it with the decided state
				why.Message += " (the run's inputs and outputs are not kept)"
				run.Error = &why
			}
			next.rec.Run = run
			return e.save(ctx, sh, d, old, next, cmds)
		}
		return drop, permanent(fmt.Errorf("run %s: %w, even after it failed", ev.RunID, big))
	case old == nil:
		ev.Refused = &protocol.RunError{Code: protocol.CodeInputTooLarge, Message: fmt.Sprintf("the run's input is %d bytes: with it, %v", len(ev.Input), big)}
		ev.Input = json.RawMessage("null")
	case answersWithOutput(ev.Type) && len(ev.Output) > 0:
		failAnswer(&ev, StopOutputTooLarge, fmt.Sprintf("the step's output of %d bytes cannot be kept: with it, %v", len(ev.Output), big))
	default:
		ev = protocol.Event{RunID: ev.RunID, Type: protocol.EvStateTooLarge, At: ev.At, Error: fmt.Sprintf("a %s event cannot be taken: %v", d.ev.Type, big)}
	}
	e.log.WarnContext(ctx, "runner: a run's state would be too large to save: decided again", eventAttrs(d.ev, "as", ev.Type, "err", big)...)
	base := e.newRun(ev.RunID)
	var parent *protocol.Parent
	if old != nil {
		base, parent = old.rec.Run, old.rec.Parent
	} else {
		parent = next.rec.Parent
	}
	run, cmds, err := engine.Decide(def, base, ev)
	if err != nil {
		return drop, permanent(err)
	}
	return e.save(ctx, sh, decided{m: d.m, ev: &ev}, old, &entry{rec: &engine.Record{Run: run, Parent: parent}, bundle: next.bundle}, cmds)
}

// armSchedules arms the timers of the schedule commands of run id, whose tasks went out now.
func (e *Engine) armSchedules(id string, cmds []engine.Command) {
	now := e.now()
	for _, c := range cmds {
		if c.Type == engine.CmdSchedule {
			e.timers.arm(id, c, now)
		}
	}
}

// rearmRun arms the timers of run, read from the bucket as ent: the tasks in flight in the
// state went out before that save, at the latest (publish, then save).
func (e *Engine) rearmRun(def *workflow.Definition, run *engine.Run, ent jetstream.KeyValueEntry) {
	saved := e.now().Add(-time.Since(ent.Created())) // the server's clock, seen on the engine's
	for _, c := range engine.Timers(def, run) {
		e.timers.arm(run.ID, c, saved)
	}
}

// newRun is the run a start event of run id is decided on: with the operator's limits
// (Config.Limits), which the run keeps, when there are any.
func (e *Engine) newRun(id string) *engine.Run {
	run := &engine.Run{ID: id}
	if e.limits != (engine.Limits{}) {
		lim := e.limits
		run.Limits = &lim
	}
	return run
}
