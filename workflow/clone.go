package workflow

import (
	"bytes"
	"maps"
	"slices"
)

// Clone returns a deep copy of d: no slice, map, pointer or raw JSON value of the copy is
// shared with d, so either may be changed without the other seeing it. A nil d clones to nil.
func (d *Definition) Clone() *Definition {
	if d == nil {
		return nil
	}
	c := *d
	c.Concurrency = clonePtr(d.Concurrency)
	c.InputSchema = bytes.Clone(d.InputSchema)
	c.Models = cloneMap(d.Models, func(m ModelDef) ModelDef {
		m.Script = bytes.Clone(m.Script)
		return m
	})
	c.Tools = cloneMap(d.Tools, func(t ToolDef) ToolDef {
		t.InputSchema, t.Mock = bytes.Clone(t.InputSchema), bytes.Clone(t.Mock)
		return t
	})
	c.MCP = cloneMap(d.MCP, func(m MCPDef) MCPDef {
		m.Command = slices.Clone(m.Command)
		return m
	})
	c.Steps = cloneSlice(d.Steps, Step.clone)
	c.Edges = slices.Clone(d.Edges)
	c.Triggers = cloneSlice(d.Triggers, func(t Trigger) Trigger {
		t.CatchUp = clonePtr(t.CatchUp)
		return t
	})
	if d.Source != nil {
		c.Source = &Source{File: d.Source.File, Lines: maps.Clone(d.Source.Lines)}
	}
	return &c
}

// clone returns a deep copy of s.
func (s Step) clone() Step {
	s.Retry = clonePtr(s.Retry)
	s.OutputSchema = bytes.Clone(s.OutputSchema)
	s.OutputRepairs = clonePtr(s.OutputRepairs)
	s.Tools = slices.Clone(s.Tools)
	if s.Policy != nil {
		s.Policy = &Policy{
			Allow:            slices.Clone(s.Policy.Allow),
			Forbid:           slices.Clone(s.Policy.Forbid),
			RequireApproval:  slices.Clone(s.Policy.RequireApproval),
			RequiredEvidence: slices.Clone(s.Policy.RequiredEvidence),
			Approvers:        slices.Clone(s.Policy.Approvers),
		}
	}
	s.Budget = clonePtr(s.Budget)
	s.Context = clonePtr(s.Context)
	s.Branches = slices.Clone(s.Branches)
	s.Approvers = slices.Clone(s.Approvers)
	return s
}

// clonePtr returns a pointer to a copy of *p, nil for nil: for the pointers to flat values.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// cloneSlice returns s with each item copied by clone; nil stays nil, empty stays empty.
func cloneSlice[T any](s []T, clone func(T) T) []T {
	if s == nil {
		return nil
	}
	out := make([]T, len(s))
	for i, v := range s {
		out[i] = clone(v)
	}
	return out
}

// cloneMap returns m with each value copied by clone; nil stays nil.
func cloneMap[V any](m map[string]V, clone func(V) V) map[string]V {
	if m == nil {
		return nil
	}
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = clone(v)
	}
	return out
}
