// Package wirespec holds the few names the NATS layer (internal/natsbox) and the codec
// (internal/wire) must agree on, so that the codec links no NATS: the kinds of a run's event
// subjects and the engine's principal, which say who sent an event, and the errors a store of
// values answers with.
//
// It owns these names only. It must not import any package of reins, nor do anything: natsbox
// builds subjects, permissions and stores with them, wire reads senders and values with them.
package wirespec

import "errors"

// The kinds of the subjects of a run's events other than the run's own (a worker's answers):
// "[NS.]reins.event.NN.RUN.submit.PRINCIPAL" carries what a submitter may do (start,
// cancel), ".human.PRINCIPAL" what an approver may do (decide, resume, signal, cancel), and
// ".engine" the events only the engine makes, which the server lets no principal publish but
// the engine's identity and admins.
const (
	SubmitKind = "submit"
	HumanKind  = "human"
	EngineKind = "engine"
)

// EngineName is the principal name of the engine's own connections, and the sender of the
// events that come on the engine's subject (but a start, which is by whom it starts it as).
const EngineName = "reins-engine"

// ErrNoValue is wrapped by the error of a store of values when it has no object of the name
// asked for, and ErrValueChanged when the object is larger than asked or not what was stored.
// Any other error of a store is the server's or the connection's: worth trying again.
var (
	ErrNoValue      = errors.New("no such value")
	ErrValueChanged = errors.New("the stored value is not the one asked for")
)
