package wire

import (
	"errors"
	"fmt"

	"github.com/reins-run/reins/internal/wirespec"
	"github.com/reins-run/reins/protocol"
)

// Who sends which event, and on which subject of the run (docs/protocol.md, "Who sends what"):
//
//   - a worker answers tasks, on the run's subject (natsbox.Names.EventSubject): completed,
//     continued, waiting, failed, timed_out (IsAnswer);
//   - a person acts on its own subjects (natsbox.Names.PrincipalSubject): start and cancel as
//     a submitter, decision, resume, signal and cancel as an approver (PersonKind);
//   - the engine, on its own subject (natsbox.Names.EngineSubject), sends what only it makes
//     (EngineMade): the starts of sub-runs and of triggers' runs, child_finished, the cancels
//     of sub-runs, ticks, granted, and the failure that answers a task it could not send.
//
// The engine reads who sent an event from the subject it came on (Sender), never from the
// message, and refuses an event on a subject its sender may not send it on. The maker of an
// event that is not a person's publishes an answer on the run's subject and anything else on
// the engine's (outbox.Subject).

// IsAnswer reports whether events of type t answer a task: the events workers send.
func IsAnswer(t protocol.EventType) bool {
	switch t {
	case protocol.EvCompleted, protocol.EvContinued, protocol.EvWaiting, protocol.EvFailed, protocol.EvTimedOut:
		return true
	}
	return false
}

// EngineMade reports whether events of type t are made by the engine alone, whatever their
// content: tick, child_finished, granted and state_too_large (which never travels). A start
// with a parent (a sub-run's) and the cancel of a sub-run are the engine's too, but their types
// are also a person's.
func EngineMade(t protocol.EventType) bool {
	switch t {
	case protocol.EvTick, protocol.EvChildFinished, protocol.EvGranted, protocol.EvStateTooLarge:
		return true
	}
	return false
}

// CheckSender reports whether the sender of ev, as Sender read it from the subject (kind and
// principal), may send it there; the error is one sentence naming the sender ("a worker", the
// principal, the engine's subject) and what it may not do. The rules:
//
//   - on the run's subject (kind ""), a worker's: only the answers of tasks (IsAnswer);
//   - on a person's subject: no event only the engine or workers make, no start of a sub-run
//     (Parent set) nor of a run whose id is the server's (ServerRunID), and each kind of event on
//     its kind of subject (PersonKind; a cancel on either);
//   - on the engine's subject: anything but a person's decision, resume or signal.
//
// It does not check what depends on the server's configuration or on runs' states (an admin's
// OnBehalfOf, a sub-run's parent): the engine does.
func CheckSender(kind, principal string, ev *protocol.Event) error {
	switch kind {
	case "":
		return workerMay(ev)
	case wirespec.EngineKind:
		if PersonKind(ev.Type) == wirespec.HumanKind {
			return fmt.Errorf("the engine's subject of run %s carries no %s event: a person's decisions come on the subject of its principal", ev.RunID, ev.Type)
		}
		return nil
	}
	return personMay(kind, principal, ev)
}

// workerMay refuses an event on the run's own subject, the workers', that is not a task's
// answer: a worker answers tasks, and nothing else.
func workerMay(ev *protocol.Event) error {
	switch {
	case IsAnswer(ev.Type):
		return nil
	case ev.Type == protocol.EvCancel:
		return fmt.Errorf("a worker may not cancel run %s: workers answer tasks, and only a person on its own subject or the engine cancels a run", ev.RunID)
	case PersonKind(ev.Type) == wirespec.HumanKind:
		return fmt.Errorf("a worker may not send a %s event for run %s: a person's decisions come on the subject of its principal", ev.Type, ev.RunID)
	}
	return fmt.Errorf("a worker may not send a %s event for run %s: on the run's subject workers only answer tasks, and only the engine makes %s events, on its own subject", ev.Type, ev.RunID, ev.Type)
}

// personMay refuses an event of principal on its subject of kind that a person may not send
// there.
func personMay(kind, principal string, ev *protocol.Event) error {
	switch {
	case EngineMade(ev.Type) || IsAnswer(ev.Type):
		return fmt.Errorf("principal %s may not send a %s event for run %s: only the engine and workers make it, on their own subjects", principal, ev.Type, ev.RunID)
	case ev.Type == protocol.EvStart && ev.Parent != nil:
		return fmt.Errorf("principal %s may not start run %s as a sub-run of run %s: only the engine starts sub-runs", principal, ev.RunID, ev.Parent.RunID)
	case ev.Type == protocol.EvStart && ServerRunID(ev.RunID) != "":
		return fmt.Errorf("principal %s may not start run %s: %s", principal, ev.RunID, ServerRunID(ev.RunID))
	}
	if want := PersonKind(ev.Type); want != kind && !(ev.Type == protocol.EvCancel && kind == wirespec.HumanKind) {
		if want == "" {
			return errors.New("principal " + principal + " may not send a " + string(ev.Type) + " event for run " + ev.RunID + ": reins knows no such event of a person")
		}
		return fmt.Errorf("principal %s may not send a %s event for run %s on its %s subject: it goes on its %s subject", principal, ev.Type, ev.RunID, kind, want)
	}
	return nil
}
