package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/reins-run/reins/tool"
)

// recordTimeout bounds the write of one record. The write does not end with the task's context:
// once a side effect happened, recording it matters even if the task is being abandoned.
const recordTimeout = 10 * time.Second

// effects records the results of the side-effecting tools of one task in an EffectStore. It
// keeps the first failure to read a record: the handler then fails the attempt rather than go
// on with a call it could not tell had already run.
type effects struct {
	store EffectStore
	log   *slog.Logger
	step  string

	mu  sync.Mutex
	err error
}

// newEffects returns the recorder of one task's side effects, nil when there is no store.
func (h *Handlers) newEffects(j *job) *effects {
	if h.cfg.Effects == nil {
		return nil
	}
	return &effects{store: h.cfg.Effects, log: h.log, step: j.name}
}

// failed returns the first failure to read a record, if any.
func (fx *effects) failed() error {
	if fx == nil {
		return nil
	}
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return fx.err
}

func (fx *effects) fail(err error) error {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	if fx.err == nil {
		fx.err = err
	}
	return err
}

// wrap returns t recording its results when its spec says it has side effects.
func (fx *effects) wrap(t tool.Tool) tool.Tool {
	if fx == nil || !t.Spec().SideEffect {
		return t
	}
	return recordedTool{Tool: t, fx: fx}
}

// effect is the record of one side-effecting call: what the tool returned (Output when it is
// JSON, else Text) or its permanent failure (Error). Retryable failures are not recorded: the
// call may run again, as the loop's rules let it.
type effect struct {
	Tool   string          `json:"tool"`
	Output json.RawMessage `json:"output,omitempty"`
	Text   *string         `json:"text,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// recordedTool runs a side-effecting tool once per call: before calling it, it looks up the
// call's record; with one, it returns the recorded result without calling the tool; without,
// it calls the tool and records a success or a permanent failure before returning, so that the
// record is stored before the loop goes on (and before the task is answered and acknowledged).
// A call is named by its idempotency key (run, iteration, call index), its tool and its
// arguments in canonical form: an iteration that runs again proposes the same call at the same
// place (the scripted model, a resumed turn), while a model that proposes something else there
// makes another call, which runs.
type recordedTool struct {
	tool.Tool
	fx *effects
}

func (r recordedTool) Call(ctx context.Context, args json.RawMessage, key string) (json.RawMessage, error) {
	name := r.Spec().Name
	if key == "" {
		if info := tool.InfoFrom(ctx); info != nil {
			key = info.Key
		}
	}
	if key == "" { // outside a loop: nothing names the call, so it cannot be recognized again
		return r.Tool.Call(ctx, args, key)
	}
	id := effectID(key, name, args)
	raw, err := r.fx.store.LoadEffect(ctx, id)
	if err != nil {
		return nil, r.fx.fail(fmt.Errorf("cannot tell whether tool %s already made call %s: %w", name, key, err))
	}
	if raw != nil {
		return r.replay(name, key, raw)
	}
	out, err := tool.SafeCall(ctx, r.Tool, args, key)
	rec := effect{Tool: name}
	switch {
	case err == nil && json.Valid(out):
		rec.Output = out
	case err == nil && len(out) > 0:
		text := string(out)
		rec.Text = &text
	case err == nil: // no output: the loop shows null
	case !tool.IsRetryable(err) && ctx.Err() == nil:
		rec.Error = err.Error()
	default: // a retryable failure, or the task's context ended: the call may run again
		return out, err
	}
	r.fx.record(ctx, id, key, rec)
	return out, err
}

// replay returns a recorded result as the tool returned it.
func (r recordedTool) replay(name, key string, raw []byte) (json.RawMessage, error) {
	var rec effect
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, r.fx.fail(fmt.Errorf("the record of call %s of tool %s is not valid: %w", key, name, err))
	}
	r.fx.log.Debug("side effect replayed from its record", "step", r.fx.step, "tool", name, "key", key)
	switch {
	case rec.Error != "":
		return nil, &tool.Error{Message: rec.Error}
	case rec.Text != nil:
		return json.RawMessage(*rec.Text), nil
	}
	return rec.Output, nil
}

// record stores rec under id. A record that cannot be stored is logged, and the result goes
// to the loop all the same: the side effect happened, and failing the attempt would only make
// it run again.
func (fx *effects) record(ctx context.Context, id, key string, rec effect) {
	data, err := json.Marshal(rec)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		defer cancel()
		err = fx.store.StoreEffect(ctx, id, data)
	}
	if err != nil {
		fx.log.Warn("builtin: the result of a side effect could not be recorded: the call runs again if its iteration does",
			"step", fx.step, "tool", rec.Tool, "key", key, "err", err)
	}
}

// effectID names a call: its idempotency key, tool and arguments (canonical JSON: object keys
// sorted, no whitespace, so that arguments read back from a checkpoint name the same call).
func effectID(key, name string, args json.RawMessage) string {
	return key + "\x00" + name + "\x00" + canonicalJSON(args)
}

func canonicalJSON(raw json.RawMessage) string {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return string(raw)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return string(raw)
	}
	return string(out)
}
