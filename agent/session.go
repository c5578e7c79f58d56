package agent

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/protocol"
)

// Budget bounds a whole composition run, whatever its loops say: a Loop with MaxIterations 0
// ends at the first budget spent. Zero fields take the defaults of [DefaultBudget]; MaxTokens and
// MaxCostUSD are unlimited when zero.
type Budget struct {
	MaxTurns    int           // leaf turns (invocations) in the whole run
	MaxDuration time.Duration // wall clock from the start of the run, on Config.Clock
	MaxTokens   int64         // input plus output tokens of every model call
	MaxCostUSD  float64       // cost of every model call
}

// DefaultBudget returns the budget zero fields take: 100 turns, 30 minutes.
func DefaultBudget() Budget { return Budget{MaxTurns: 100, MaxDuration: 30 * time.Minute} }

func (b Budget) withDefaults() Budget {
	d := DefaultBudget()
	if b.MaxTurns <= 0 {
		b.MaxTurns = d.MaxTurns
	}
	if b.MaxDuration <= 0 {
		b.MaxDuration = d.MaxDuration
	}
	return b
}

// Config configures a composition run, in process ([NewSession]) or durable (Handler).
type Config struct {
	Budget Budget
	// Clock measures the wall-clock budget and stamps events; nil means the real clock. An LLM
	// agent's loop has its own (LLMConfig.Loop.Clock): give both the same one.
	Clock clock.Clock
	// Logger receives the runtime's log; nil discards it.
	Logger *slog.Logger
	// OnEvent, when set, sees every event once it has its Seq and Time, in order, one at a time
	// for a run: in process before Run yields it; durably before the task's turn is saved, so
	// that a turn that fails and runs again is seen again (and the tasks of different runs may
	// call it concurrently). It must not block for long: the run waits for it.
	OnEvent func(Event)
}

func (c Config) withDefaults() Config {
	c.Budget = c.Budget.withDefaults()
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Result is how a composition run ended.
type Result struct {
	// Reason is the root agent's end: completed, escalated (By, Detail), max_iterations (a root
	// Loop), failed (Err), cancelled, timeout, max_turns, max_tokens or max_cost.
	Reason Reason `json:"reason"`
	By     string `json:"by,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Error is Err's text; Err is the error of a failed run (nil otherwise).
	Error string `json:"error,omitempty"`
	Err   error  `json:"-"`
	// State is the session state at the end.
	State map[string]json.RawMessage `json:"state"`
	Turns int                        `json:"turns"`
	Usage protocol.Usage             `json:"usage"`
	// Loops holds the last End of every loop that ended, by name.
	Loops map[string]End `json:"loops,omitempty"`
}

// Invocation describes the turn of a leaf being run: what a leaf needs to stay deterministic
// across invocations and resumes.
type Invocation struct {
	// RunID is unique in the run: SESSION/PATH/N. An LLM agent uses it as its loop's run id, so
	// idempotency keys never repeat across turns.
	RunID string
	Path  string
	N     int // 1 for the agent's first turn in the run
	// ModelCalls and ToolCalls count what the agent's earlier turns in this run did (tools by
	// name), so that a scripted model or a mocked tool goes on where the last turn stopped.
	ModelCalls int
	ToolCalls  map[string]int
}

// Session is the state of a composition run and the handle of the run: create it with
// [NewSession], set the inputs with Put, run it once with Run, then read Result. Leaves receive a
// Session too, to read the state (Get, Text, Keys) and their Invocation; in a Parallel branch it
// shows the branch's view.
type Session struct {
	id      string
	cfg     Config
	view    *view
	inv     Invocation
	started bool
	result  *Result
}

// NewSession returns the session of a run identified by id (it prefixes the leaves' loop run
// ids, so it should be unique among runs that share tools).
func NewSession(id string, cfg Config) *Session {
	return &Session{id: id, cfg: cfg.withDefaults(), view: newView(nil)}
}

// ID returns the session's id.
func (s *Session) ID() string { return s.id }

// Put sets an input before the run starts. Inputs are not events; once the run has started, the
// state changes only through the agents' state events, and Put is an error.
func (s *Session) Put(key string, value any) error {
	if s.started {
		return fmt.Errorf("agent: session %s has started: the state changes only through its agents' state events", s.id)
	}
	ev, err := Write(key, value)
	if err != nil {
		return err
	}
	raw, err := compactValue(key, ev.Value)
	if err != nil {
		return err
	}
	s.view.set(key, raw)
	return nil
}

// Get returns the value of key as JSON, and whether it is set.
func (s *Session) Get(key string) (json.RawMessage, bool) { return s.view.get(key) }

// Text returns the value of key as text: a JSON string's content, any other value's JSON, "" when
// the key is not set.
func (s *Session) Text(key string) string {
	raw, ok := s.view.get(key)
	if !ok {
		return ""
	}
	return text(raw)
}

// Keys returns the keys set, sorted.
func (s *Session) Keys() []string { return s.view.keys() }

// State returns a copy of the whole state.
func (s *Session) State() map[string]json.RawMessage { return s.view.flatten() }

// Invocation describes the leaf turn this session was given to (zero outside one).
func (s *Session) Invocation() Invocation {
	inv := s.inv
	if inv.RunID == "" {
		inv.RunID = s.id
	}
	return inv
}

// Result returns how the run ended; its Reason is empty while the run has not ended.
func (s *Session) Result() Result {
	if s.result == nil {
		return Result{State: s.State()}
	}
	return *s.result
}

// text is the text of a JSON value: a string's content, any other value's JSON.
func text(raw json.RawMessage) string {
	if len(raw) > 0 && raw[0] == '"' {
		var str string
		if json.Unmarshal(raw, &str) == nil {
			return str
		}
	}
	return string(raw)
}

// view is the state as one agent sees it: its own writes over its parent's (a Parallel branch's
// view over the state when the Parallel began).
type view struct {
	parent *view
	vals   map[string]json.RawMessage
	// dirty records the keys written since the last checkpoint (durable base view only).
	dirty map[string]bool
}

func newView(parent *view) *view {
	return &view{parent: parent, vals: map[string]json.RawMessage{}}
}

func (v *view) get(key string) (json.RawMessage, bool) {
	for x := v; x != nil; x = x.parent {
		if val, ok := x.vals[key]; ok {
			return val, true
		}
	}
	return nil, false
}

func (v *view) set(key string, val json.RawMessage) {
	v.vals[key] = val
	if v.dirty != nil {
		v.dirty[key] = true
	}
}

func (v *view) flatten() map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	var layers []*view
	for x := v; x != nil; x = x.parent {
		layers = append(layers, x)
	}
	for _, l := range slices.Backward(layers) {
		maps.Copy(out, l.vals)
	}
	return out
}

func (v *view) keys() []string {
	return slices.Sorted(maps.Keys(v.flatten()))
}
