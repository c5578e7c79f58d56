package client

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/suggest"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// Errors a Client returns, to match with [errors.Is].
var (
	// ErrNotFound: no run has this id.
	ErrNotFound = errors.New("no such run")
	// ErrFinished: the run has already finished.
	ErrFinished = errors.New("the run has already finished")
	// ErrExists: a run with this id was already started.
	ErrExists = errors.New("a run with this id already exists")
	// ErrCorrupt: the run's record cannot be decoded; List shows it with StatusCorrupt, and
	// Delete removes it.
	ErrCorrupt = runstore.ErrCorrupt
)

// StatusCorrupt is the status List gives a run whose record cannot be decoded; its Error says
// why (code CodeCorrupt).
const StatusCorrupt = runstore.StatusCorrupt

// CodeCorrupt is the error code of a run whose record cannot be decoded.
const CodeCorrupt = runstore.CodeCorrupt

// Record is what the reins_runs bucket holds under a run id: the run state (Run.Status, the
// steps, the output or error), the parent run when it is a sub-run, and the bucket's revision.
type Record = engine.Record

// NewResult returns the result of the run rec holds, with the steps in the order of def (nil:
// by id).
func NewResult(def *workflow.Definition, rec *Record) protocol.Result {
	if rec == nil || rec.Run == nil {
		return protocol.Result{Steps: []protocol.StepResult{}, Path: []string{}}
	}
	run := rec.Run
	res := protocol.Result{RunID: run.ID, Status: run.Status, Output: run.Output, Steps: []protocol.StepResult{}, Path: slices.Clone(run.Path)}
	if len(res.Output) == 0 {
		res.Output = json.RawMessage("null")
	}
	if run.Error != nil {
		e := *run.Error
		res.Error = &e
	}
	if res.Path == nil {
		res.Path = []string{}
	}
	for _, key := range StepOrder(def, run) {
		res.Steps = append(res.Steps, stepResult(key, run.Steps[key]))
	}
	for _, w := range WaitingSteps(def, run) {
		wr := protocol.WaitResult{Step: w.Key, Wait: w.Wait, Prompt: w.Prompt, Event: w.Event, Pending: w.Pending}
		if !w.Step.Until.IsZero() {
			u := w.Step.Until
			wr.Until = &u
		}
		res.Waiting = append(res.Waiting, wr)
	}
	if s := run.Slot; s != nil {
		res.Concurrency = &protocol.ConcurrencyResult{Key: s.Key, Limit: s.Limit}
		if !s.Granted.IsZero() {
			g := s.Granted
			res.Concurrency.Granted = &g
		}
	}
	return res
}

// StepOrder lists the keys of run's steps as results and progress show them: in definition
// order with each parallel or map step's children after it, then any others by key.
func StepOrder(def *workflow.Definition, run *engine.Run) []string {
	var keys []string
	seen := map[string]bool{}
	add := func(k string) {
		if _, ok := run.Steps[k]; ok && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	if def != nil {
		for _, s := range def.Steps {
			add(s.ID)
			if sr := run.Steps[s.ID]; sr != nil {
				for i := range sr.Children {
					add(s.ID + "#" + strconv.Itoa(i))
				}
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(run.Steps)) {
		add(k)
	}
	return keys
}

func stepResult(key string, sr *engine.StepRun) protocol.StepResult {
	r := protocol.StepResult{ID: key}
	if sr == nil {
		return r
	}
	r.Status, r.StopReason, r.StopDetail, r.Iterations, r.Label, r.Attempts, r.Error = sr.Status, sr.StopReason, sr.StopDetail, sr.Iteration, sr.Label, sr.Attempts, sr.Error
	if sr.Usage != (protocol.Usage{}) {
		u := sr.Usage
		r.Usage = &u
	}
	return r
}

// didYouMean is " (did you mean NAME?)" when one of known nearly spells name, else "": the hint
// of an error about a step or call a user typed.
func didYouMean(name string, known []string) string {
	known = slices.Clone(known)
	slices.Sort(known) // the same hint every time when two are as near
	if near := suggest.Closest(name, slices.Compact(known)); near != "" {
		return " (did you mean " + near + "?)"
	}
	return ""
}
