// Package wire is the protocol the processes of reins speak over NATS: the subjects, bodies and
// message ids of task and event messages, values by reference, and the keys of checkpoints. It
// owns encoding and decoding, with errors of one sentence; it must not decide anything
// (package engine does) or run anything (packages runner and worker), and imports nothing of
// reins but protocol (and what NATS names need): a worker links it without the engine. What
// the engine's side stores (run records, workflow bundles) is package internal/runstore's.
//
// Messages (ARCHITECTURE.md has the table):
//
//   - A task is protocol.Task as JSON on natsbox.TaskSubject(task.Handler), with Nats-Msg-Id =
//     task.MsgID, so JetStream stores a task dispatched twice once.
//   - An event is protocol.Event as JSON, with the message id EventMsgID gives it, on the
//     subject of whoever may send it (SenderSubject): workers publish the answers to tasks on
//     natsbox.EventSubject(runID); a person publishes start, cancel, decision, resume and
//     signal on its own subjects (natsbox.PrincipalSubject); the engine publishes what only it
//     makes (the starts of sub-runs and of triggers' runs, child_finished, the cancels of
//     sub-runs, ticks, granted) on natsbox.Names.EngineSubject(runID), which the server lets
//     no principal but the engine's identity and admins publish on.
//   - When a run ends, the engine publishes its id on natsbox.CancelSubject(runID) (core NATS,
//     not stored), so that workers cancel handlers still running for it.
package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/reins-run/reins/protocol"
)

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("malformed message")

// MaxRunIDLen bounds a run id, so that the ids of sub-runs nested eight deep still make subject
// tokens and KV keys.
const MaxRunIDLen = 64

// CheckRunID reports whether id has the form of a run id, one the server gives itself or one
// a client may choose: 1 to MaxRunIDLen bytes of [A-Za-z0-9_-]. (The engine names sub-runs
// parent/step/activation[/index]: longer, with '/'.) A client's choice must pass
// CheckClientRunID too.
func CheckRunID(id string) error {
	if id == "" || len(id) > MaxRunIDLen {
		return fmt.Errorf("run id %q: want 1 to %d characters", id, MaxRunIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			r, _ := utf8.DecodeRuneInString(id[i:]) // the character, not its first byte
			return fmt.Errorf("run id %q: the character %q at byte %d is not one of A-Z a-z 0-9 _ -", id, r, i)
		}
	}
	return nil
}

// The marks of the run ids of the server's space (ServerRunID).
const (
	// TriggerRunIDPrefix begins the id of every run a trigger starts ("t-NAME-HASH",
	// trigger.RunID): derived from a webhook delivery or a due time anyone can compute.
	TriggerRunIDPrefix = "t-"
	// ForkRunMark is followed by a number at the end of the id a fork of run RUN gets by
	// default ("RUN-fork-N", client.Fork).
	ForkRunMark = "-fork-"
)

// ServerRunID says why id is in the server's space of run ids, the ids the engine and the
// server give runs themselves and no client may start a run with; "" when it is not. The space
// is: an id with '/' (a sub-run: parent/step/activation[/index][/iteration/call]); an id that
// begins with "t-" (a trigger's run); an id that ends in "-fork-N" (a fork). A client that took
// such an id first would make the trigger's start, the parent's sub-run or the fork find its
// run taken.
func ServerRunID(id string) string {
	switch {
	case strings.Contains(id, "/"):
		return "an id with '/' names a sub-run, which only the engine starts"
	case strings.HasPrefix(id, TriggerRunIDPrefix):
		return `an id that begins with "` + TriggerRunIDPrefix + `" names a run of a trigger, which only the server starts`
	case isForkRunID(id):
		return `an id that ends in "` + ForkRunMark + `N" names a fork, which only reins runs fork makes`
	}
	return ""
}

// isForkRunID reports whether id ends in "-fork-N", N one or more decimal digits.
func isForkRunID(id string) bool {
	i := strings.LastIndex(id, ForkRunMark)
	if i <= 0 || i+len(ForkRunMark) == len(id) {
		return false
	}
	for _, c := range []byte(id[i+len(ForkRunMark):]) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// CheckClientRunID reports whether a client may choose id for a run it starts: CheckRunID, and
// none of the shapes of the ids the server gives (ServerRunID), so that a person cannot take
// one before the server does. Its error is one sentence naming the rule.
func CheckClientRunID(id string) error {
	if why := ServerRunID(id); why != "" {
		return fmt.Errorf("run id %q is the server's to give: %s, and a client may not choose one", id, why)
	}
	return CheckRunID(id)
}

// Tasks and events are decoded by decodeTaskFast and decodeEventFast (fast.go), and what they do
// not take by go-json-experiment's v1 package: encoding/json's semantics (what the engine and
// workers encode with) on the v2 decoder, which allocates 2 times where encoding/json allocates
// 12 to 14 and takes half the time.

// EncodeTask returns the body of a task message: json.Marshal(t), written by AppendTask.
func EncodeTask(t *protocol.Task) ([]byte, error) { return Encode(t, AppendTask) }

// DecodeTask decodes the body of a task message.
func DecodeTask(data []byte) (*protocol.Task, error) {
	t := protocol.Task{Item: -1} // a task without "item" is not a child
	if !decodeTaskFast(data, &t) {
		t = protocol.Task{Item: -1}
		if err := jsonv1.Unmarshal(data, &t); err != nil {
			return nil, fmt.Errorf("task: %w: %v", ErrMalformed, err)
		}
	}
	switch {
	case t.RunID == "":
		return nil, fmt.Errorf("task: %w: no run_id", ErrMalformed)
	case t.Step == "":
		return nil, fmt.Errorf("task %s: %w: no step", t.RunID, ErrMalformed)
	case t.MsgID == "":
		return nil, fmt.Errorf("task %s/%s: %w: no msg_id", t.RunID, t.Step, ErrMalformed)
	case t.Activation < 1 || t.Iteration < 1 || t.Attempt < 1:
		return nil, fmt.Errorf("task %s: %w: activation, iteration and attempt must be 1 or more", t.MsgID, ErrMalformed)
	}
	return &t, nil
}

// EncodeEvent returns the body of an event message: json.Marshal(ev), written by AppendEvent.
func EncodeEvent(ev *protocol.Event) ([]byte, error) { return Encode(ev, AppendEvent) }

// DecodeEvent decodes the body of an event message.
func DecodeEvent(data []byte) (*protocol.Event, error) {
	ev := new(protocol.Event)
	if err := DecodeEventInto(data, ev); err != nil {
		return nil, err
	}
	return ev, nil
}

// DecodeEventInto is [DecodeEvent] into ev, whatever ev held before: an engine decodes every
// event into one it keeps for the next once the event is settled. On an error ev holds what
// was decoded so far.
func DecodeEventInto(data []byte, ev *protocol.Event) error {
	*ev = protocol.Event{Item: -1} // an event without "item" addresses no child
	if !decodeEventFast(data, ev) {
		*ev = protocol.Event{Item: -1}
		if err := jsonv1.Unmarshal(data, ev); err != nil {
			return fmt.Errorf("event: %w: %v", ErrMalformed, err)
		}
	}
	if ev.RunID == "" {
		return fmt.Errorf("event: %w: no run_id", ErrMalformed)
	}
	if ev.Type == "" {
		return fmt.Errorf("event for run %s: %w: no type", ev.RunID, ErrMalformed)
	}
	return nil
}

// Answer returns the event a worker publishes to answer task t: typ completed, continued,
// waiting, failed or timed_out, addressed like the task (its Resume included: the engine takes
// only the answer of the task it dispatched last), in protocol.Version.
func Answer(t *protocol.Task, typ protocol.EventType, at time.Time) *protocol.Event {
	ev := new(protocol.Event)
	AnswerIn(ev, t, typ, at)
	return ev
}

// AnswerIn makes ev, whatever it held, the event [Answer] returns: a worker builds every
// answer in an event it keeps.
func AnswerIn(ev *protocol.Event, t *protocol.Task, typ protocol.EventType, at time.Time) {
	*ev = protocol.Event{RunID: t.RunID,
		Type: typ, At: at.UTC(), Step: t.Step, Item: t.Item,
		Activation: t.Activation, Iteration: t.Iteration, Attempt: t.Attempt, Resume: t.Resume,
		Protocol: protocol.Version,
	}
}

// EventMsgID is the message id of an event, the same for the same event, so that JetStream
// stores an event published twice once:
//
//   - start:          RUN/start
//   - cancel:         RUN/cancel
//   - an answer:      TASKMSGID/TYPE (continued: TASKMSGID/continued/NONCE), where TASKMSGID
//     is RUN/STEP[#ITEM]/ACTIVATION/ITERATION/ATTEMPT, with /rRESUME after it for the answer
//     to a resumed task (Resume > 0), as the engine names that task
//   - a human's or an outside event (decision, resume, signal):
//     RUN/STEP[#ITEM]/ACTIVATION/ITERATION/ATTEMPT[/rRESUME]/TYPE/NONCE, the nonce new for each
//     request
//   - tick:           RUN/tick/STEP/ITEM/ACTIVATION/UNIXNANO
//   - child_finished: CHILDRUN/finished (the child's run id is unique)
//   - granted:        RUN/granted (a run is granted its concurrency slot once)
//
// For child_finished, ev.Output is not part of the id; the caller passes the child's run id.
func EventMsgID(ev *protocol.Event, child string) string {
	switch ev.Type {
	case protocol.EvStart, protocol.EvCancel:
		return ev.RunID + "/" + string(ev.Type)
	case protocol.EvTick:
		return ev.RunID + "/tick/" + ev.Step + "/" + strconv.Itoa(ev.Item) + "/" + strconv.Itoa(ev.Activation) + "/" + strconv.FormatInt(ev.At.UnixNano(), 10)
	case protocol.EvChildFinished:
		return child + "/finished"
	case protocol.EvGranted:
		return ev.RunID + "/granted"
	}
	var buf [128]byte // on the stack: every answer of every iteration has an id
	return string(appendAnswerMsgID(buf[:0], ev))
}

// AppendEventMsgID appends [EventMsgID] of ev to dst: a worker sizes its answer with it
// without making the string.
func AppendEventMsgID(dst []byte, ev *protocol.Event, child string) []byte {
	switch ev.Type {
	case protocol.EvStart, protocol.EvCancel, protocol.EvTick, protocol.EvChildFinished, protocol.EvGranted:
		return append(dst, EventMsgID(ev, child)...)
	}
	return appendAnswerMsgID(dst, ev)
}

// appendAnswerMsgID appends the message id of an answer, a human's or an outside event.
func appendAnswerMsgID(id []byte, ev *protocol.Event) []byte {
	id = append(append(append(id, ev.RunID...), '/'), ev.Step...)
	if ev.Item >= 0 {
		id = strconv.AppendInt(append(id, '#'), int64(ev.Item), 10)
	}
	for _, n := range [...]int{ev.Activation, ev.Iteration, ev.Attempt} {
		id = strconv.AppendInt(append(id, '/'), int64(n), 10)
	}
	if ev.Resume > 0 {
		// The answers of a resumed task must not be taken for duplicates of the answers of the
		// task that paused (the same iteration and attempt).
		id = strconv.AppendInt(append(id, "/r"...), int64(ev.Resume), 10)
	}
	id = append(append(id, '/'), ev.Type...)
	if ev.Nonce != "" {
		id = append(append(id, '/'), ev.Nonce...)
	}
	return id
}

// CheckpointScope is the KV key prefix (one token) of the checkpoint of one activation of a
// step (or child): RUN/STEP[=ITEM]/ACTIVATION, with every character a KV key may not hold
// replaced by '_'. Its writes are keys SCOPE.ITERATION.N, or SCOPE.ITERATION.rRESUME.N for the
// writes of a task resumed after a human (CheckpointWrite.Key).
func CheckpointScope(runID, step string, item, activation int) string {
	key := step
	if item >= 0 {
		key += "=" + strconv.Itoa(item)
	}
	return kvSafe(runID) + "/" + kvSafe(key) + "/" + strconv.Itoa(activation)
}

// CheckpointWrite names one checkpoint write: its scope (CheckpointScope), the iteration, the
// resume of the task that wrote it (0 for a task dispatched as the iteration began, R > 0 for
// the task dispatched again after a human, protocol.Task.Resume) and its number among that
// task's writes (0-based). Writes fold in the order (Iteration, Resume, N).
type CheckpointWrite struct {
	Scope     string
	Iteration int
	Resume    int
	N         int
}

// Key is the KV key of w: SCOPE.ITERATION.N, or SCOPE.ITERATION.rRESUME.N when Resume > 0.
// The resume is a token of its own so that the filter SCOPE.ITERATION.* matches the writes of
// the iteration's first task only.
func (w CheckpointWrite) Key() string {
	if w.Resume > 0 {
		return w.Scope + "." + strconv.Itoa(w.Iteration) + ".r" + strconv.Itoa(w.Resume) + "." + strconv.Itoa(w.N)
	}
	return w.Scope + "." + strconv.Itoa(w.Iteration) + "." + strconv.Itoa(w.N)
}

// CheckpointKey is the key of the n-th checkpoint write (0-based) of iteration iter in scope,
// by the iteration's first task (Resume 0).
func CheckpointKey(scope string, iter, n int) string {
	return CheckpointWrite{Scope: scope, Iteration: iter, N: n}.Key()
}

// ParseCheckpointWrite splits a key CheckpointWrite.Key made: the numbers must be written as
// Key writes them (no sign, no leading zero; a resume of 1 or more, the others 0 or more), so
// that one write has one key.
func ParseCheckpointWrite(key string) (CheckpointWrite, error) {
	parts := strings.Split(key, ".")
	if (len(parts) != 3 && len(parts) != 4) || parts[0] == "" {
		return CheckpointWrite{}, fmt.Errorf("checkpoint key %q: %w: want SCOPE.ITERATION.N or SCOPE.ITERATION.rRESUME.N", key, ErrMalformed)
	}
	w := CheckpointWrite{Scope: parts[0]}
	iter, ok1 := canonicalInt(parts[1])
	n, ok2 := canonicalInt(parts[len(parts)-1])
	if !ok1 || !ok2 {
		return CheckpointWrite{}, fmt.Errorf("checkpoint key %q: %w: iteration and write number must be integers of 0 or more, without sign or leading zero", key, ErrMalformed)
	}
	w.Iteration, w.N = iter, n
	if len(parts) == 4 {
		digits, found := strings.CutPrefix(parts[2], "r")
		resume, ok := canonicalInt(digits)
		if !found || !ok || resume < 1 {
			return CheckpointWrite{}, fmt.Errorf("checkpoint key %q: %w: the resume must be r and an integer of 1 or more, without sign or leading zero", key, ErrMalformed)
		}
		w.Resume = resume
	}
	return w, nil
}

// ParseCheckpointKey splits a key CheckpointKey made (a write of an iteration's first task):
// its scope, iteration and write number. The key of a resumed task's write is refused; code
// that reads every write of a scope uses ParseCheckpointWrite, which takes both.
func ParseCheckpointKey(key string) (scope string, iter, n int, err error) {
	w, err := ParseCheckpointWrite(key)
	if err != nil {
		return "", 0, 0, err
	}
	if w.Resume > 0 {
		return "", 0, 0, fmt.Errorf("checkpoint key %q: %w: a resumed task's write (ParseCheckpointWrite reads it), not SCOPE.ITERATION.N", key, ErrMalformed)
	}
	return w.Scope, w.Iteration, w.N, nil
}

// canonicalInt parses s when it is an integer of 0 or more written as strconv.Itoa writes it.
func canonicalInt(s string) (int, bool) {
	v, err := strconv.Atoi(s)
	return v, err == nil && v >= 0 && strconv.Itoa(v) == s
}

// EffectKey is the key in natsbox.EffectsBucket of the recorded result of the side effect id
// (an idempotency key, with whatever else identifies the call): the hex SHA-256 of id, since an
// id may be long and hold characters a KV key may not.
func EffectKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

func kvSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '-', r == '_', r == '/', r == '=':
			return r
		}
		return '_'
	}, s)
}
