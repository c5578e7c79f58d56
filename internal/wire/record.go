package wire

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/reins-run/reins/internal/wirespec"
	"github.com/reins-run/reins/protocol"
)

// TaskKey names the step of a task as the run state does: step, or step#item for a child.
func TaskKey(t *protocol.Task) string { return protocol.StepKey(t.Step, t.Item) }

// Nonce is a random id of 16 hex digits: a person's event carries one, so that the run
// records it once however often it is delivered.
func Nonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// Sender sets what the subject of ev's message says of its sender, as the engine reads it: the
// run id, kind and principal natsbox.Names.ParseEventSubject read from it. ok is false for a
// subject of another run.
//
//   - The run's own subject (kind ""): a worker's; By and OnBehalfOf are cleared.
//   - A person's subject (wirespec.SubmitKind, wirespec.HumanKind): By is the principal whose
//     subject it is; OnBehalfOf is as the message says (the engine lets only an admin set it).
//   - The engine's subject (wirespec.EngineKind, principal wirespec.EngineName): a start is by
//     the principal the engine starts it as, its OnBehalfOf (a trigger's run: the principal
//     that registered it; a sub-run: its parent's submitter), or by nobody; any other event is
//     by wirespec.EngineName.
func Sender(runID, kind, principal string, ev *protocol.Event) (ok bool) {
	if runID != ev.RunID {
		return false
	}
	switch kind {
	case "":
		ev.By, ev.OnBehalfOf = "", ""
		return true
	case wirespec.EngineKind:
		if ev.Type == protocol.EvStart {
			ev.By = ev.OnBehalfOf
		} else {
			ev.By = wirespec.EngineName
		}
		ev.OnBehalfOf = ""
		return true
	}
	ev.By = principal
	if ev.ID == "" {
		ev.ID = ev.Nonce
	}
	return true
}

// PersonKind is the kind of principal subject an event a person sends travels on ("" for
// the events of engines and workers).
func PersonKind(t protocol.EventType) string {
	switch t {
	case protocol.EvStart, protocol.EvCancel:
		return wirespec.SubmitKind
	case protocol.EvDecision, protocol.EvResume, protocol.EvSignal:
		return wirespec.HumanKind
	}
	return ""
}
