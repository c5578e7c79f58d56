package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/reins-run/reins/protocol"
)

// ErrNoIteration: the run's events hold no answer to the iteration asked for.
var ErrNoIteration = errors.New("no such iteration")

// IterationPart is one answer to a task of an iteration, as the run's events keep it: which
// task (activation, attempt, resume), how it answered, and what it did (Record, when the
// handler recorded it: the built-in agent does). An iteration that waited for humans has two
// parts or more (the proposal, then the action on the decisions); a failed attempt and its
// retry are parts too.
type IterationPart struct {
	Step       string             `json:"step"` // STEP, or PARENT#ITEM for a child
	Activation int                `json:"activation"`
	Iteration  int                `json:"iteration"`
	Attempt    int                `json:"attempt"`
	Resume     int                `json:"resume,omitempty"`
	Answer     protocol.EventType `json:"answer"` // continued, completed, waiting, failed, timed_out
	Event      protocol.Event     `json:"event"`
}

// IsAnswer reports whether ev is a worker's answer to a task.
func IsAnswer(ev *protocol.Event) bool {
	switch ev.Type {
	case protocol.EvContinued, protocol.EvCompleted, protocol.EvWaiting, protocol.EvFailed, protocol.EvTimedOut:
		return true
	}
	return false
}

// IterationParts returns the answers in evs to iteration n of step (a step key), in the
// order they were stored, of every activation.
func IterationParts(evs []protocol.Event, step string, n int) []IterationPart {
	var parts []IterationPart
	for i := range evs {
		ev := &evs[i]
		if !IsAnswer(ev) || ev.Iteration != n || protocol.StepKey(ev.Step, ev.Item) != step {
			continue
		}
		parts = append(parts, IterationPart{Step: step, Activation: ev.Activation, Iteration: ev.Iteration,
			Attempt: ev.Attempt, Resume: ev.Resume, Answer: ev.Type, Event: *ev})
	}
	return parts
}

// ParseIteration reads STEP:N (a step key and an iteration number from 1).
func ParseIteration(s string) (string, int, error) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 {
		return "", 0, fmt.Errorf("%q is not STEP:N (a step and an iteration number, e.g. investigate:3)", s)
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil || n < 1 {
		return "", 0, fmt.Errorf("%q is not STEP:N: the iteration %q is not a number from 1", s, s[i+1:])
	}
	return s[:i], n, nil
}

// Iteration returns the parts of iteration n of step in run runID. [ErrNoIteration] when the
// run's events hold none (the step did not reach it, or its events were pruned).
func (c *Client) Iteration(ctx context.Context, runID, step string, n int) ([]IterationPart, error) {
	evs, err := c.Events(ctx, runID)
	if err != nil {
		return nil, err
	}
	parts := IterationParts(evs, step, n)
	if len(parts) == 0 {
		var keys []string
		for i := range evs {
			if IsAnswer(&evs[i]) {
				keys = append(keys, protocol.StepKey(evs[i].Step, evs[i].Item))
			}
		}
		hint := ""
		if !slices.Contains(keys, step) {
			hint = didYouMean(step, keys)
		}
		return nil, fmt.Errorf("client: run %s has no answer to iteration %d of step %s%s: %w", runID, n, step, hint, ErrNoIteration)
	}
	return parts, nil
}

// RecordText reads back the whole text a record keeps by reference (trace.CallRecord's
// OutputRef, ArgumentsRef, ProposalRecord.TextRef) for run runID.
func (c *Client) RecordText(ctx context.Context, runID, ref string) (string, error) {
	raw, err := c.values.In(ctx, runID, json.RawMessage(ref))
	if err != nil {
		return "", fmt.Errorf("client: run %s: the text kept by reference: %w", runID, err)
	}
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		return "", fmt.Errorf("client: run %s: the text kept by reference is not a JSON string: %w", runID, err)
	}
	return text, nil
}

// WholeTexts replaces, in place, the texts the records of parts (of run runID) clip at 2 KiB
// with the whole ones their references keep: a proposal's text, a call's arguments and result.
func (c *Client) WholeTexts(ctx context.Context, runID string, parts []IterationPart) error {
	read := func(s, ref *string) error {
		if *ref == "" {
			return nil
		}
		text, err := c.RecordText(ctx, runID, *ref)
		if err != nil {
			return err
		}
		*s = text
		return nil
	}
	for i := range parts {
		r := parts[i].Event.Record
		if r == nil {
			continue
		}
		if r.Proposal != nil {
			if err := read(&r.Proposal.Text, &r.Proposal.TextRef); err != nil {
				return err
			}
		}
		for j := range r.Calls {
			call := &r.Calls[j]
			if err := read(&call.Arguments, &call.ArgumentsRef); err != nil {
				return err
			}
			if err := read(&call.Output, &call.OutputRef); err != nil {
				return err
			}
		}
	}
	return nil
}
