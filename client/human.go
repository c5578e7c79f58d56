package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// Errors of the answers to a waiting run (Decide, Resume), to match with [errors.Is].
var (
	// ErrNotWaiting: the run has no step waiting for what was asked (a decision, input).
	ErrNotWaiting = errors.New("nothing in the run waits for it")
	// ErrRunNotWaiting: no step of the run waits for anything (it is running). It is an
	// [ErrNotWaiting] too: errors.Is(err, ErrNotWaiting) holds for both, and ErrRunNotWaiting
	// tells a run that waits for nothing from one that waits for something else.
	ErrRunNotWaiting error = runNotWaiting{}
	// ErrAmbiguous: several steps wait for what was asked; the caller must name one.
	ErrAmbiguous = errors.New("several steps match")
)

type runNotWaiting struct{}

func (runNotWaiting) Error() string        { return "no step of the run waits" }
func (runNotWaiting) Is(target error) bool { return target == ErrNotWaiting }

// notWaiting is the error of an answer to run that nothing in it waits for: ErrRunNotWaiting
// when no step waits at all, else ErrNotWaiting.
func notWaiting(run *engine.Run) error {
	if len(WaitingSteps(nil, run)) == 0 {
		return ErrRunNotWaiting
	}
	return ErrNotWaiting
}

// Waiting is one step of a run that waits for a human or a signal, as commands list it.
type Waiting struct {
	// Key is the step's key in the run: its id, or "parent#i" for a child.
	Key     string
	Step    *engine.StepRun
	Wait    protocol.WaitKind
	Prompt  string                 // an approval step's rendered prompt
	Event   string                 // the signal a wait_event step waits for
	Pending []protocol.PendingCall // an agent's calls not decided yet
}

// WaitingSteps lists the steps of run that wait for a human or a signal, in the order of the
// run result (def may be nil: then Event is not filled in).
func WaitingSteps(def *workflow.Definition, run *engine.Run) []Waiting {
	var out []Waiting
	for _, key := range StepOrder(def, run) {
		sr := run.Steps[key]
		if sr == nil || sr.Status != protocol.StepWaiting {
			continue
		}
		w := Waiting{Key: key, Step: sr, Wait: sr.Wait, Prompt: sr.Prompt}
		for _, p := range sr.Pending {
			if _, done := sr.Decisions[p.CallID]; !done && p.Child == nil { // a sub-run's call is not a human's
				w.Pending = append(w.Pending, p)
			}
		}
		if def != nil && sr.Wait == protocol.WaitEvent {
			if s := def.StepByID(sr.Step); s != nil {
				w.Event = s.Event
			}
		}
		out = append(out, w)
	}
	return out
}

// Decided is one decision a Client sent.
type Decided struct {
	Step   string // the step's key
	CallID string // "" for an approval step
	Tool   string // the pending call's tool
	// Event is the id of the decision's event: the run's acts ([engine.Run.Acts]) record it
	// once the engine took it (AwaitDecided).
	Event string
	// wait is the waiting the decision addresses: activation, iteration, attempt, resume.
	wait [4]int
}

// Decide sends a human decision to run runID: approve or deny, with message (the result a
// denied call shows the model; an approval step's output). The decision is the client's
// principal's; onBehalfOf, when not empty, names the principal an admin decides for (the
// engine refuses it from anyone else). target is a pending call's id, or the key of a step
// waiting for approval (every call it has pending, or the approval step), or "" for everything
// in the run that waits for approval. It returns what it decided. [ErrNotWaiting] when nothing
// matches target ([ErrRunNotWaiting] when no step of the run waits at all), [ErrFinished] when the
// run has finished, [ErrNotFound] when there is no such run.
//
// A step with approvers (docs/reference/server.md, "Identity") is decided only by one of them: a principal
// the client can tell is not one is refused at once ([ErrForbidden], naming the principal, and
// nothing is sent); otherwise, the decision sent, Decide waits for the engine's verdict on it
// (until ctx ends) and returns ErrForbidden when the engine refused it: the run keeps waiting.
func (c *Client) Decide(ctx context.Context, runID, target string, approve bool, message, onBehalfOf string) ([]Decided, error) {
	rec, err := c.waitingRecord(ctx, runID)
	if err != nil {
		return nil, err
	}
	if onBehalfOf == c.principal {
		onBehalfOf = ""
	}
	var def *workflow.Definition
	var evs []*protocol.Event
	var out []Decided
	var calls []string
	verdicts := map[string]string{} // event id → the step it decides, for steps with approvers
	sent := func(w Waiting, callID, tool string) Decided {
		return Decided{Step: w.Key, CallID: callID, Tool: tool, Event: evs[len(evs)-1].ID,
			wait: [4]int{w.Step.Activation, w.Step.Iteration, w.Step.Attempt, w.Step.Resume}}
	}
	decide := func(w Waiting, callID string) error {
		if def == nil {
			if def, err = c.Definition(ctx, rec); err != nil {
				return err
			}
		}
		ev := c.humanEvent(runID, w, protocol.Event{Type: protocol.EvDecision, CallID: callID, Approve: approve, Message: message, OnBehalfOf: onBehalfOf})
		if approvers := stepApprovers(def, w.Step.Step); len(approvers) > 0 {
			who := cmp.Or(onBehalfOf, c.principal)
			if !mayBe(approvers, who) {
				return fmt.Errorf("client: run %s: principal %s is not one of the approvers of step %s (%s): %w", runID, who, w.Key, strings.Join(approvers, ", "), ErrForbidden)
			}
			verdicts[ev.ID] = w.Key
		}
		evs = append(evs, ev)
		return nil
	}
	var waiting []string // the steps waiting for approval, for a did-you-mean
	for _, w := range WaitingSteps(nil, rec.Run) {
		if w.Wait != protocol.WaitApproval {
			continue
		}
		waiting = append(waiting, w.Key)
		if len(w.Step.Pending) == 0 { // an approval step
			if target == "" || target == w.Key {
				if err := decide(w, ""); err != nil {
					return nil, err
				}
				out = append(out, sent(w, "", ""))
			}
			continue
		}
		for _, p := range w.Pending {
			calls = append(calls, p.CallID)
			if target == "" || target == w.Key || target == p.CallID {
				if err := decide(w, p.CallID); err != nil {
					return nil, err
				}
				out = append(out, sent(w, p.CallID, p.Tool))
			}
		}
	}
	if len(evs) == 0 {
		what := "nothing waits for approval"
		if target != "" {
			what = fmt.Sprintf("no call or step %q waits for approval", target)
			if len(calls) > 0 {
				what += " (pending calls: " + strings.Join(calls, ", ") + ")"
			}
			what += didYouMean(target, append(calls, waiting...))
		}
		return nil, fmt.Errorf("client: run %s: %s: %w", runID, what, notWaiting(rec.Run))
	}
	if onBehalfOf != "" && !c.isAdmin() {
		return nil, fmt.Errorf("client: run %s: principal %s may not decide on behalf of %s: only an admin may: %w", runID, c.principal, onBehalfOf, ErrForbidden)
	}
	for _, ev := range evs {
		if err := c.publish(ctx, ev); err != nil {
			return nil, fmt.Errorf("client: decide for run %s: %w", runID, err)
		}
	}
	if len(verdicts) > 0 {
		if err := c.awaitVerdicts(ctx, runID, verdicts); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// stepApprovers returns the approvers of the step id of def (nil when it has none).
func stepApprovers(def *workflow.Definition, id string) []string {
	step := def.StepByID(id)
	switch {
	case step == nil:
		return nil
	case step.Type == workflow.Agent && step.Policy != nil:
		return step.Policy.Approvers
	}
	return step.Approvers
}

// mayBe reports whether principal may be one of approvers as far as a client can tell: named,
// or some role named (the client does not know its roles; the engine, which does, decides).
func mayBe(approvers []string, principal string) bool {
	return slices.ContainsFunc(approvers, func(a string) bool { return a == principal || strings.HasPrefix(a, "role:") })
}

// isAdmin reports whether the client's connection has an admin's permissions: to write run
// records, which nobody else may.
func (c *Client) isAdmin() bool {
	return c.may == nil || c.may(natsbox.APIOf(c.js).KVPut(c.names.RunsBucket(), "x"))
}

// awaitVerdicts waits until the run records the engine's verdict on each decision of ids
// (event id → step) and returns ErrForbidden naming the principal when one was refused. A run
// that ends first has taken no more decisions.
func (c *Client) awaitVerdicts(ctx context.Context, runID string, ids map[string]string) error {
	for rec, err := range c.watchRecords(ctx, runID) {
		if err != nil {
			return fmt.Errorf("client: run %s: the decision was sent, but the engine's verdict did not come: %w", runID, err)
		}
		seen := 0
		for _, a := range rec.Run.Acts {
			if _, ok := ids[a.ID]; !ok {
				continue
			}
			if a.Refused != "" {
				return fmt.Errorf("client: run %s: step %s: the decision was refused: %s; the run keeps waiting: %w", runID, a.Step, a.Refused, ErrForbidden)
			}
			seen++
		}
		if seen == len(ids) || rec.Finished() {
			return nil
		}
	}
	return nil
}

// Approve approves what run runID waits for at target (a pending call's id, a step waiting
// for approval, or "" for everything that waits), with message: the output of an approval
// step. It is Decide of an approval by the client's principal; the errors are Decide's.
func (c *Client) Approve(ctx context.Context, runID, target, message string) error {
	_, err := c.Decide(ctx, runID, target, true, message, "")
	return err
}

// Deny denies what run runID waits for at target, as Approve approves it; message is what a
// denied call shows the model, or why an approval step failed.
func (c *Client) Deny(ctx context.Context, runID, target, message string) error {
	_, err := c.Decide(ctx, runID, target, false, message, "")
	return err
}

// AwaitDecided waits until the engine has taken each decision of ds (what Decide returned
// for run runID): nil once the run's acts record each one, or once the run has finished;
// [ErrForbidden], naming the principal, when the engine refused one (the run keeps waiting);
// [ErrNotWaiting] when one no longer fits what its step waits for (another decision came first,
// or the step stopped waiting), so that the engine took it without effect and recorded nothing.
// It ends with ctx's error when ctx is done first (no engine runs).
func (c *Client) AwaitDecided(ctx context.Context, runID string, ds []Decided) error {
	for rec, err := range c.watchRecords(ctx, runID) {
		if err != nil {
			return fmt.Errorf("client: run %s: the decision was sent, but the engine did not take it: %w", runID, err)
		}
		if rec.Finished() {
			return nil
		}
		taken := 0
		for _, d := range ds {
			i := slices.IndexFunc(rec.Run.Acts, func(a engine.Act) bool { return a.ID == d.Event })
			switch {
			case i >= 0 && rec.Run.Acts[i].Refused != "":
				a := rec.Run.Acts[i]
				return fmt.Errorf("client: run %s: step %s: the decision was refused: %s; the run keeps waiting: %w", runID, a.Step, a.Refused, ErrForbidden)
			case i >= 0:
				taken++
			case moot(rec.Run, d):
				what := "step " + d.Step
				if d.CallID != "" {
					what = "call " + d.CallID + " of step " + d.Step
				}
				return fmt.Errorf("client: run %s: %s no longer waits for this decision (another came first): %w", runID, what, ErrNotWaiting)
			}
		}
		if taken == len(ds) {
			return nil
		}
	}
	return fmt.Errorf("client: run %s: the decision was sent, but the watch ended", runID)
}

// moot reports whether decision d no longer fits run: its step does not wait for approval in
// the waiting d addressed, or its call was decided by another decision.
func moot(run *engine.Run, d Decided) bool {
	sr := run.Steps[d.Step]
	if sr == nil || sr.Status != protocol.StepWaiting || sr.Wait != protocol.WaitApproval ||
		[4]int{sr.Activation, sr.Iteration, sr.Attempt, sr.Resume} != d.wait {
		return true
	}
	_, decided := sr.Decisions[d.CallID]
	return d.CallID != "" && decided
}

// Resume sends a human's input to the step of run runID paused on needs_human: step names it,
// or "" when only one step is paused. It returns the step's key. [ErrNotWaiting] when no step
// (or not step) waits for input ([ErrRunNotWaiting] when no step waits at all), [ErrAmbiguous]
// when several do and step is "".
func (c *Client) Resume(ctx context.Context, runID, step string, input json.RawMessage) (string, error) {
	if err := wire.CheckJSON(input, int(c.maxInput)); err != nil {
		return "", fmt.Errorf("client: resume run %s: the input %w", runID, err)
	}
	rec, err := c.waitingRecord(ctx, runID)
	if err != nil {
		return "", err
	}
	var paused []Waiting
	for _, w := range WaitingSteps(nil, rec.Run) {
		if w.Wait == protocol.WaitInput && (step == "" || step == w.Key) {
			paused = append(paused, w)
		}
	}
	switch {
	case len(paused) == 0 && step != "":
		var keys []string
		for _, w := range WaitingSteps(nil, rec.Run) {
			if w.Wait == protocol.WaitInput {
				keys = append(keys, w.Key)
			}
		}
		return "", fmt.Errorf("client: run %s: step %q does not wait for input%s: %w", runID, step, didYouMean(step, keys), notWaiting(rec.Run))
	case len(paused) == 0:
		return "", fmt.Errorf("client: run %s: no step waits for input: %w", runID, notWaiting(rec.Run))
	case len(paused) > 1:
		keys := make([]string, len(paused))
		for i, w := range paused {
			keys[i] = w.Key
		}
		return "", fmt.Errorf("client: run %s: steps %s wait for input: name one with --step: %w", runID, strings.Join(keys, ", "), ErrAmbiguous)
	}
	w := paused[0]
	if err := c.mayAct(ctx, rec, "resume"); err != nil {
		return "", err
	}
	if err := c.publish(ctx, c.humanEvent(runID, w, protocol.Event{Type: protocol.EvResume, Output: input})); err != nil {
		return "", fmt.Errorf("client: resume run %s: %w", runID, err)
	}
	return w.Key, nil
}

// Signal sends the event name with data to run runID. A wait_event step waiting for it takes
// it; otherwise the run keeps it for the first wait_event step on name that starts later. A
// principal who may not signal the run ([engine.ActRefusal]: only its submitter, the approvers
// its workflow names and admins may), or a run that took as many signals as its server
// allows ([engine.SignalsSpent]), is refused at once with [ErrForbidden], and nothing is sent;
// what the client cannot tell, the engine refuses, recording it in the run's acts.
func (c *Client) Signal(ctx context.Context, runID, name string, data json.RawMessage) error {
	if name == "" {
		return fmt.Errorf("client: signal run %s: the event has no name", runID)
	}
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	if err := wire.CheckJSON(data, int(c.maxInput)); err != nil {
		return fmt.Errorf("client: signal %s to run %s: the data %w", name, runID, err)
	}
	rec, err := c.waitingRecord(ctx, runID)
	if err != nil {
		return err
	}
	if err := c.mayAct(ctx, rec, "signal"); err != nil {
		return err
	}
	// The id makes the signal count once, even when an engine decides it twice after a crash.
	id := wire.Nonce()
	ev := &protocol.Event{RunID: runID, Nonce: id, Type: protocol.EvSignal, At: c.now().UTC(), Item: -1, Name: name, Output: data, ID: id}
	if err := c.publish(ctx, ev); err != nil {
		return fmt.Errorf("client: signal %s to run %s: %w", name, runID, err)
	}
	return nil
}

// mayAct refuses, with ErrForbidden, a signal, resume or cancel (act) of the client's principal that
// the engine would refuse on the run of rec, so that nothing of it is sent. When the client
// does not know its principal's roles and a role among the workflow's approvers might allow
// it, the engine decides.
func (c *Client) mayAct(ctx context.Context, rec *Record, act string) error {
	def, err := c.Definition(ctx, rec)
	if err != nil {
		return err
	}
	roles, known := c.roles, c.roles != nil
	if !known && c.isAdmin() {
		roles, known = []string{natsbox.RoleAdmin}, true
	}
	why := engine.ActRefusal(def, rec.Run, act, c.principal, roles)
	if why != "" && !known && slices.ContainsFunc(engine.Signallers(def), func(a string) bool { return strings.HasPrefix(a, "role:") }) {
		why = ""
	}
	if why == "" && act == "signal" {
		why = engine.SignalsSpent(rec.Run, c.principal)
	}
	if why != "" {
		return fmt.Errorf("client: run %s: %s: %w", rec.Run.ID, why, ErrForbidden)
	}
	return nil
}

// waitingRecord reads the record of a run that has not finished.
func (c *Client) waitingRecord(ctx context.Context, runID string) (*Record, error) {
	rec, err := c.Get(ctx, runID)
	if err != nil {
		return nil, err
	}
	if rec.Finished() {
		return nil, fmt.Errorf("client: run %s ended %s: %w", runID, rec.Run.Status, ErrFinished)
	}
	return rec, nil
}

// humanEvent addresses ev to waiting step w of run runID, with a nonce of its own: two
// decisions are two events, while a publish retried by NATS is stored once.
func (c *Client) humanEvent(runID string, w Waiting, ev protocol.Event) *protocol.Event {
	ev.At = c.now().UTC()
	ev.Step, ev.Item = w.Key, -1
	if w.Step.Parent != "" {
		ev.Step, ev.Item = w.Step.Parent, w.Step.Item
	}
	ev.Activation, ev.Iteration, ev.Attempt, ev.Resume = w.Step.Activation, w.Step.Iteration, w.Step.Attempt, w.Step.Resume
	n := wire.Nonce()
	ev.ID = n
	ev.RunID, ev.Nonce = runID, n
	return &ev
}
