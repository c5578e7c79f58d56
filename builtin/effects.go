package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/worker"
)

// effects runs the side-effecting tools of one task through an EffectStore, once per call. It
// keeps the first failure of the record (a record that cannot be read, a claim that cannot be
// made, a result that cannot be recorded, a claim lost): the handler then fails the attempt
// rather than go on with a call whose record it cannot trust.
type effects struct {
	store EffectStore
	lease worker.Lease

	mu  sync.Mutex
	err error
}

// newEffects returns the recorder of one task's side effects, nil when there is no store.
func (h *Handlers) newEffects(j *job) *effects {
	if h.cfg.Effects == nil {
		return nil
	}
	return &effects{store: h.cfg.Effects, lease: h.cfg.Effects.LeaseFor(j.task)}
}

// failed returns the first failure of the record, if any.
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

// wrap returns t recording its results when its spec says it has side effects; a call runs
// on past the end of its attempt for up to timeout.
func (fx *effects) wrap(t tool.Tool, timeout time.Duration) tool.Tool {
	if fx == nil || !t.Spec().SideEffect {
		return t
	}
	lease := fx.lease
	lease.Timeout = timeout
	return recordedTool{Tool: t, fx: fx, lease: lease}
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

// recordedTool runs a side-effecting tool once per call, through the store's claim: an attempt
// that finds the call's result recorded returns it without calling the tool; one that finds
// another attempt making the call waits for its result; otherwise the tool is called, and its
// result (a success or a permanent failure) is recorded before the call returns to the loop, so
// before the iteration is checkpointed and its task answered and acknowledged.
// A call is named by its idempotency key (run, iteration, call index), its tool and its
// arguments in canonical form: an iteration that runs again proposes the same call at the same
// place (the scripted model, a resumed turn), while a model that proposes something else there
// makes another call, which runs.
type recordedTool struct {
	tool.Tool
	fx    *effects
	lease worker.Lease
}

// errNotMade is what the store's do returns for a call that failed without effect (a retryable
// failure, or the task's context ended): nothing is recorded and the call may run again.
type errNotMade struct {
	out json.RawMessage
	err error
}

func (e *errNotMade) Error() string { return e.err.Error() }

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
	raw, err := r.fx.store.Once(ctx, effectID(key, name, args), r.lease, func(ctx context.Context) ([]byte, error) {
		return r.call(ctx, name, args, key)
	})
	var notMade *errNotMade
	if errors.As(err, &notMade) {
		return notMade.out, notMade.err
	}
	if err != nil && ctx.Err() != nil {
		// The attempt (or the loop's wall clock) ended while the call runs on: the loop
		// reads the end of its context; the call's result is recorded for the next attempt.
		return nil, err
	}
	if err != nil {
		return nil, r.fx.fail(fmt.Errorf("call %s of tool %s: %w", key, name, err))
	}
	return r.replay(name, key, raw)
}

// call calls the tool and returns the record of its result; a failure that leaves the call to
// be made again is an *errNotMade.
func (r recordedTool) call(ctx context.Context, name string, args json.RawMessage, key string) ([]byte, error) {
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
		return nil, &errNotMade{out: out, err: err}
	}
	return json.Marshal(rec)
}

// replay returns a recorded result as the tool returned it.
func (r recordedTool) replay(name, key string, raw []byte) (json.RawMessage, error) {
	var rec effect
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, r.fx.fail(fmt.Errorf("the record of call %s of tool %s is not valid: %w", key, name, err))
	}
	switch {
	case rec.Error != "":
		return nil, &tool.Error{Message: rec.Error}
	case rec.Text != nil:
		return json.RawMessage(*rec.Text), nil
	}
	return rec.Output, nil
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
