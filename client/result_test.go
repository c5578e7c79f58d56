package client

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/protocol"
)

// encodeRecord must return what json.Marshal returns: the engine saved records with it before,
// and decodeRecord reads both. (wire's tests hold the run's encoder to encoding/json field by
// field; these hold the record around it.)

// sameRecordJSON fails t unless encodeRecord and json.Marshal give the same bytes, or both fail.
func sameRecordJSON(t *testing.T, rec *Record) {
	t.Helper()
	want, wantErr := json.Marshal(rec)
	got, err := runstore.EncodeRecord(rec)
	switch {
	case (err == nil) != (wantErr == nil):
		t.Fatalf("error %v, json.Marshal's %v", err, wantErr)
	case !bytes.Equal(got, want):
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestEncodeRecord(t *testing.T) {
	run := &engine.Run{ID: "r-1", Status: protocol.RunRunning, Input: json.RawMessage(`{"a": "<b>"}`),
		StartedAt: time.Date(2026, 11, 21, 10, 0, 0, 5, time.UTC), Steps: map[string]*engine.StepRun{"s": {Status: protocol.StepRunning}}}
	bad := &engine.Run{ID: "r-2", Deadline: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
	for _, rec := range []*Record{
		nil, {}, {Revision: 7}, {Run: run}, {Run: run, Parent: &protocol.Parent{RunID: "p", Step: "call", Item: -1, Activation: 2}, Revision: 3},
		{Parent: &protocol.Parent{}}, {Run: bad}, {Run: bad, Parent: &protocol.Parent{}},
	} {
		sameRecordJSON(t, rec)
	}
	if _, err := runstore.EncodeRecord(&Record{Run: bad}); err == nil {
		t.Fatal("a deadline in year 10000 encoded")
	}
}

// TestRecordMembers: appendRecord writes run and parent. A field added to Record must be
// written there too (and added here).
func TestRecordMembers(t *testing.T) {
	var names []string
	typ := reflect.TypeFor[Record]()
	for i := range typ.NumField() {
		if f := typ.Field(i); f.IsExported() && f.Tag.Get("json") != "-" {
			names = append(names, f.Tag.Get("json"))
		}
	}
	if want := []string{"run", "parent,omitempty"}; !slices.Equal(names, want) {
		t.Fatalf("Record's json members are %q, appendRecord writes %q", names, want)
	}
}

// TestEncodeRandomRecords compares with encoding/json on records made at random, from values
// encoding/json writes in its own ways, in runs of every shape.
func TestEncodeRandomRecords(t *testing.T) {
	r := recordMaker{rand.New(rand.NewPCG(1, 2))}
	for range 2000 {
		sameRecordJSON(t, r.record())
	}
}

// recordMaker makes records at random.
type recordMaker struct{ *rand.Rand }

var (
	makerStrings = []string{"", "plan", "a <b> & c", "quote \" backslash \\", "line\nbreak\ttab\x01", "é 日本 \u2028", "bad \xff"}
	makerRaws    = []string{`null`, `{"notes":"looked at one more file","n":[1,2.5]}`, ` { "a" : [1, 2] } `, `"<&>"`, `"` + "\u2028" + `"`, `[]`}
	makerZones   = []*time.Location{time.UTC, time.FixedZone("", 5*3600+30*60), time.FixedZone("", -7*3600), time.FixedZone("", 90)}
	makerFloats  = []float64{0, 0.0123, 1e-7, 1e21, 3, math.Copysign(0, -1)}
)

func (r recordMaker) record() *Record {
	rec := &Record{Revision: r.Uint64()}
	if r.IntN(8) > 0 {
		rec.Run = r.run()
	}
	if r.IntN(2) == 0 {
		rec.Parent = &protocol.Parent{RunID: r.str(), Step: r.str(), Item: r.IntN(5) - 1, Activation: r.IntN(3)}
	}
	return rec
}

func (r recordMaker) run() *engine.Run {
	run := &engine.Run{ID: r.str(), Workflow: r.str(), Hash: r.str(), Status: protocol.RunStatus(r.str()), Input: r.raw(),
		StartedAt: r.time(), Deadline: r.time(), Executed: r.IntN(100), Output: r.raw()}
	if r.IntN(4) > 0 {
		run.Steps = map[string]*engine.StepRun{}
		for range r.IntN(5) {
			run.Steps[r.str()] = r.step()
		}
	}
	if r.IntN(4) > 0 {
		run.Edges = []engine.EdgeState{}
		for range r.IntN(4) {
			run.Edges = append(run.Edges, engine.EdgeState{State: engine.EdgeStatus(r.str()), Uses: r.IntN(3)})
		}
	}
	run.Path, run.SignalIDs = r.strs(), r.strs()
	if r.IntN(3) == 0 {
		run.Error = &protocol.RunError{Code: r.str(), Message: r.str(), Step: r.str()}
	}
	if r.IntN(3) == 0 {
		run.Signals = map[string][]json.RawMessage{}
		for range r.IntN(3) {
			var q []json.RawMessage
			for range r.IntN(3) {
				q = append(q, r.raw())
			}
			run.Signals[r.str()] = q
		}
	}
	return run
}

func (r recordMaker) step() *engine.StepRun {
	if r.IntN(10) == 0 {
		return nil
	}
	s := &engine.StepRun{Step: r.str(), Parent: r.str(), Item: r.IntN(3), Workflow: r.str(), Status: protocol.StepStatus(r.str()),
		Activation: r.IntN(3), Iteration: r.IntN(20), Attempt: r.IntN(3), Attempts: r.IntN(30),
		StartedAt: r.time(), FirstIterationAt: r.time(), NotBefore: r.time(), Input: r.raw(), Output: r.raw(),
		Label: r.str(), StopReason: r.str(), Error: r.str(), Prompt: r.str(), Instructions: r.str(), Goal: r.str(),
		Children: r.IntN(3), Next: r.IntN(3), Running: r.IntN(3), Done: r.IntN(3), Wait: protocol.WaitKind(r.str()),
		Until: r.time(), WaitingSince: r.time(), Waited: time.Duration(r.Int64N(1e12)), Resume: r.IntN(3), HumanInput: r.raw()}
	if r.IntN(2) == 0 {
		s.Usage = protocol.Usage{ModelCalls: r.IntN(3), ToolCalls: r.IntN(3), InputTokens: r.IntN(5000), OutputTokens: r.IntN(500),
			CostUSD: makerFloats[r.IntN(len(makerFloats))]}
	}
	for range r.IntN(3) {
		s.Pending = append(s.Pending, protocol.PendingCall{CallID: r.str(), Tool: r.str(), Arguments: r.raw()})
	}
	if r.IntN(3) == 0 {
		s.Decisions = map[string]protocol.Decision{}
		for range r.IntN(3) {
			s.Decisions[r.str()] = protocol.Decision{CallID: r.str(), Approve: r.IntN(2) == 0, Message: r.str(), By: r.str()}
		}
	}
	return s
}

func (r recordMaker) str() string { return makerStrings[r.IntN(len(makerStrings))] }

// strs is nil, empty or a few strings.
func (r recordMaker) strs() []string {
	switch r.IntN(3) {
	case 0:
		return nil
	case 1:
		return []string{}
	}
	return []string{r.str(), r.str()}
}

// raw is nil or JSON.
func (r recordMaker) raw() json.RawMessage {
	if r.IntN(4) == 0 {
		return nil
	}
	return json.RawMessage(makerRaws[r.IntN(len(makerRaws))])
}

// time is zero or a time in one of a few zones.
func (r recordMaker) time() time.Time {
	if r.IntN(3) == 0 {
		return time.Time{}
	}
	return time.Unix(r.Int64N(4e9), r.Int64N(1e9)).In(makerZones[r.IntN(len(makerZones))])
}
