package wire

import (
	"github.com/reins-run/reins/internal/natsbox"
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
// message, and refuses an event on a subject its sender may not send it on.

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

// SenderSubject is the subject the maker of ev publishes it on in namespace n: a worker's
// answer on the run's subject, anything else on the engine's (the engine's and an admin's
// connections may publish there). A person's events go on the person's own subject instead
// (natsbox.Names.PrincipalSubject), which the client chooses.
func SenderSubject(n natsbox.Names, ev *protocol.Event) (string, error) {
	if IsAnswer(ev.Type) {
		return n.EventSubject(ev.RunID)
	}
	return n.EngineSubject(ev.RunID)
}
