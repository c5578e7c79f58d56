package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider"
	"github.com/reins-run/reins/tool"
)

// On a shared server every value the handlers store is scrubbed of the operator's credentials
// (Operator.Secrets): a provider or an MCP server that echoes a key in a successful reply, or
// a tool whose result holds one, stores nothing of it in the run, its events, its tasks, the
// dead-letter queue, checkpoints, sessions or recorded effects, and streams nothing of it to
// readers. The model and each tool are wrapped once, so the loop never sees a secret: what it
// records, checkpoints and answers is already clean.

// scrubbedModel is a model whose replies, errors and streamed pieces have the secrets hidden.
type scrubbedModel struct {
	model.Model
	s *provider.Scrubber
}

// scrubbed returns m with the secrets of s hidden in what it returns (m itself when s hides
// nothing); a model with prices keeps them.
func scrubbed(m model.Model, s *provider.Scrubber) model.Model {
	if s.Empty() {
		return m
	}
	return model.WithPricing(&scrubbedModel{Model: m, s: s}, m)
}

// Generate calls the model, holding back a streamed piece that could still become part of a
// secret until what follows shows it is not (a provider calls OnDelta from one goroutine, in
// order).
func (m *scrubbedModel) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	var flush func()
	if req.OnDelta != nil {
		r := *req
		r.OnDelta, flush = m.deltas(req.OnDelta)
		req = &r
	}
	resp, err := m.Model.Generate(ctx, req)
	if flush != nil {
		flush()
	}
	return m.s.Response(resp), m.s.Error(err)
}

// deltas returns the OnDelta that scrubs the reply's text and each call's arguments as they
// stream to emit, and the flush that emits what is still held once the reply ended.
func (m *scrubbedModel) deltas(emit func(model.Delta)) (onDelta func(model.Delta), flush func()) {
	text := m.s.Stream(func(piece string) { emit(model.Delta{Text: piece}) })
	calls := map[int]*provider.Stream{}
	onDelta = func(d model.Delta) {
		if d.Text != "" {
			text.Write(d.Text)
		}
		if d.CallID != "" || d.CallName != "" {
			emit(model.Delta{CallIndex: d.CallIndex, CallID: m.s.String(d.CallID), CallName: d.CallName})
		}
		if d.Arguments == "" {
			return
		}
		st := calls[d.CallIndex]
		if st == nil {
			i := d.CallIndex
			st = m.s.Stream(func(piece string) { emit(model.Delta{CallIndex: i, Arguments: piece}) })
			calls[i] = st
		}
		st.Write(d.Arguments)
	}
	flush = func() {
		text.Flush()
		for _, i := range slices.Sorted(maps.Keys(calls)) {
			calls[i].Flush()
		}
	}
	return onDelta, flush
}

// scrubbedTool is a tool whose results and errors have the secrets hidden.
type scrubbedTool struct {
	tool.Tool
	s *provider.Scrubber
}

// scrubTool returns t with the secrets of s hidden in its results (t itself when s hides
// nothing).
func scrubTool(t tool.Tool, s *provider.Scrubber) tool.Tool {
	if s.Empty() {
		return t
	}
	return scrubbedTool{Tool: t, s: s}
}

func (t scrubbedTool) Call(ctx context.Context, args json.RawMessage, key string) (json.RawMessage, error) {
	out, err := t.Tool.Call(ctx, args, key)
	var te *tool.Error
	if errors.As(err, &te) && te == err {
		// Kept a *tool.Error, so that the loop still reads whether it is retryable.
		c := *te
		c.Message, c.Err = t.s.String(te.Message), t.s.Error(te.Err)
		return t.s.JSON(out), &c
	}
	return t.s.JSON(out), t.s.Error(err)
}
