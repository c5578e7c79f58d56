package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/mcptool"
	"github.com/reins-run/reins/metrics"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/provider"
	"github.com/reins-run/reins/provider/registry"
	"github.com/reins-run/reins/ratelimit"
	"github.com/reins-run/reins/session"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/trace"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// Config configures the built-in handlers.
type Config struct {
	// Tools are the Go tools that workflow tools name by handler: a workflow tool with
	// handler = "orders.read" runs Tools["orders.read"].
	Tools map[string]tool.Tool
	// Models are Go models by name: a model of this name serves every llm and agent step whose
	// model has that name, whatever the workflow declares for it (provider = "go" declares one
	// that only a program provides; reins.Reins.Model registers them). Config.Model, when set,
	// still replaces every model.
	Models map[string]model.Model
	// Model, when set (PROVIDER:NAME, as registry.Open takes it), replaces the model of every
	// llm and agent step (the CLI's --model).
	Model string
	// Registry holds what registry.Open needs besides a name: API key, base URL, prices,
	// timeouts, Getenv. A workflow model's base_url and api_key_env take precedence.
	Registry registry.Options
	// Logger receives a line per answered task at debug level (nil: discarded).
	Logger *slog.Logger
	// Clock is the clock of the agent loop, scripted latencies and mocked tools (nil: the real
	// clock); tests pass a virtual one.
	Clock clock.Clock
	// Operator, when set, makes these handlers serve a shared server: models are called only
	// through the operator's providers, at the endpoint paired with each key, and MCP tools
	// only through the operator's MCP servers; a workflow's base_url, api_key_env, cassette,
	// replay models and [mcp] tables fail the task (E_OPERATOR_ONLY). Nil: the person running
	// the workflow is the operator (reins run), and the workflow's keys are honoured.
	Operator Operator
	// Effects records the results of side-effecting tool calls, so that an iteration that runs
	// again after a crash reuses them instead of doing the side effect twice (Register passes
	// the worker's, over natsbox.EffectsBucket). Nil records nothing: every call runs.
	Effects EffectStore
	// Metrics counts the model calls (tokens, cost) and the agents' tool calls; nil: no metrics
	// (Register passes the worker's).
	Metrics *metrics.Metrics
	// Limiter, when set with Operator, makes the calls of the operator's providers share the
	// operator's rate limits (rpm, tpm, max_concurrent of each provider and model) and the
	// pauses providers ask for (a 429, a Retry-After) with every worker of the server: a call
	// waits for capacity (package ratelimit, docs/providers.md). Nil: calls do not wait.
	Limiter *ratelimit.Limiter
	// Deltas receives the pieces of the model replies of llm and agent steps with stream = true,
	// as they arrive (Register passes the worker's PublishDelta: core NATS, fire and forget). It
	// must not block. Nil: steps do not stream.
	Deltas func(protocol.Delta)
	// Sessions keeps the conversations of agent steps with a session (Register opens one on
	// the worker's connection, over natsbox.SessionsBucket). Nil: such a step fails for good, naming it.
	Sessions SessionStore
	// ToolTimeout bounds a call of a workflow tool that sets no timeout of its own (the
	// operator's limits.tool_timeout); 0: the lease's (worker.Options.EffectTimeout, a minute by
	// default). A side-effecting call runs on past its attempt's end up to it.
	ToolTimeout time.Duration
}

// SessionStore is where agent steps with a session load and save it (*session.Store).
type SessionStore interface {
	Get(ctx context.Context, key string) (*session.Session, error)
	Save(ctx context.Context, sc session.Scope, m session.Mark, c *session.Conversation, now time.Time, ttl time.Duration) (bool, error)
}

// Operator is what the handlers need of a server's operator configuration
// (*operator.Resolved implements it).
type Operator interface {
	Provider(name string) (operator.Provider, bool)
	APIKey(provider string) (string, error)
	MCPServer(name string) (operator.MCPServer, bool)
	// MCPServers names every MCP server: New starts them, so that they are up before the
	// first task needs them.
	MCPServers() []string
	// Secrets are the credentials the operator's configuration resolved (provider keys,
	// webhook secrets): hidden in every value the handlers store (scrub.go).
	Secrets() []string
}

// EffectStore runs side effects once per id, with claims and leases (worker.Effects implements
// it over natsbox.EffectsBucket; see worker.Effects.Once for the protocol).
type EffectStore interface {
	// Once runs do unless a result is recorded for id, and returns the recorded result.
	Once(ctx context.Context, id string, lease worker.Lease, do func(context.Context) ([]byte, error)) ([]byte, error)
	// LeaseFor is the lease of an attempt of task t.
	LeaseFor(t *protocol.Task) worker.Lease
}

// Task is what a handler needs of the task it answers; worker.TaskContext provides it through
// the adapter in register.go.
type Task interface {
	context.Context
	Task() *protocol.Task
	Input() json.RawMessage
	Bundle() (*workflow.Bundle, error)
	Continue(output any) error
	Complete(output any) error
	// CompleteWithStop completes the task with a stop reason and its sentence
	// (worker.Outcome.StopReason, StopDetail).
	CompleteWithStop(output any, stopReason, detail string) error
	Fail(err error) error
	FailPermanent(err error) error
	// Wait answers that the iteration stopped on calls waiting for a human decision, or for
	// their sub-runs (PendingCall.Child).
	Wait(pending []protocol.PendingCall) error
	Checkpoint(v any) error
	AppendCheckpoint(items ...any) error
	LoadCheckpoint() (json.RawMessage, error)
	AddUsage(u protocol.Usage)
	// Record keeps the iteration's record, sent with the answer (worker.TaskContext.Record).
	Record(it trace.Iteration)
	// KeepText and ReadText keep a large text out of the checkpoint (worker.TaskContext's).
	KeepText(text string) (string, error)
	ReadText(ref string) (string, error)
}

// Handlers serves llm and agent tasks. It is safe for concurrent use.
type Handlers struct {
	cfg   Config
	log   *slog.Logger
	clock clock.Clock

	mu      sync.Mutex
	models  map[modelKey]model.Model
	schemas map[schemaKey]*outputSchema
	mcp     map[mcpKey]*mcptool.Toolset
	closed  bool
	// texts keeps the large texts of agent states read back last (textCache); states the
	// state each loop's last write on this worker left (stateCache).
	texts  *textCache
	states *stateCache
	// scrub hides the operator's credentials in what models and tools return (nil without
	// an operator).
	scrub *provider.Scrubber
}

// textCacheBytes bounds the texts Handlers keep read back (a worker's memory for them).
const textCacheBytes = 32 << 20

// New checks cfg and returns the handlers.
func New(cfg Config) (*Handlers, error) {
	if cfg.Model != "" {
		if _, _, err := registry.Split(cfg.Model); err != nil {
			return nil, fmt.Errorf("builtin: %w", err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Tools)) {
		if cfg.Tools[name] == nil {
			return nil, fmt.Errorf("builtin: the Go tool registered under handler %q is nil", name)
		}
	}
	h := &Handlers{cfg: cfg, log: cfg.Logger, clock: cfg.Clock, texts: newTextCache(textCacheBytes), states: newStateCache(),
		models: map[modelKey]model.Model{}, schemas: map[schemaKey]*outputSchema{}, mcp: map[mcpKey]*mcptool.Toolset{}}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Operator != nil {
		h.scrub = provider.NewScrubber(cfg.Operator.Secrets()...)
	}
	if h.clock == nil {
		h.clock = clock.Real{}
	}
	if err := h.startMCP(); err != nil {
		_ = h.Close()
		return nil, err
	}
	return h, nil
}

// job is one task with what its handler reads: the task, its bundle and its step.
type job struct {
	t      Task
	task   *protocol.Task
	bundle *workflow.Bundle
	step   *workflow.Step
	name   string // the step as errors name it: STEP, or STEP#ITEM for a child
	down   mcpDown
}

// onDelta is the model.Request.OnDelta of j's model call turn (from 1) when j's step streams:
// each piece goes to Config.Deltas, never blocking the call nor failing it. Nil otherwise.
func (h *Handlers) onDelta(j *job, turn func() int) func(model.Delta) {
	if !j.step.Stream || h.cfg.Deltas == nil {
		return nil
	}
	base := protocol.Delta{RunID: j.task.RunID, Step: j.name, Iteration: j.task.Iteration}
	return func(d model.Delta) {
		out := base
		out.Turn, out.Text, out.CallIndex, out.CallID, out.CallName, out.Arguments = turn(), d.Text, d.CallIndex, d.CallID, d.CallName, d.Arguments
		h.cfg.Deltas(out)
	}
}

// permanent marks an error that retrying cannot fix.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// failf returns a permanent error of one sentence naming the step.
func (j *job) failf(format string, args ...any) error {
	return permanent{fmt.Errorf("step %s: "+format, append([]any{j.name}, args...)...)}
}

// load reads the task's bundle and step, which must be of type typ.
func (h *Handlers) load(t Task, typ workflow.StepType) (*job, error) {
	task := t.Task()
	j := &job{t: t, task: task, name: stepName(task)}
	b, err := t.Bundle()
	if err != nil {
		return nil, fmt.Errorf("step %s: cannot read workflow %.12s: %w", j.name, task.Workflow, err)
	}
	if b == nil || b.Definition == nil {
		return nil, j.failf("workflow %.12s has no definition", task.Workflow)
	}
	j.bundle = b
	if j.step = b.Definition.StepByID(task.Body); j.step == nil {
		return nil, j.failf("workflow %s has no step %q", b.Definition.Name, task.Body)
	}
	if j.step.Type != typ {
		return nil, j.failf("the step is of type %s, but the %s handler serves %s steps", j.step.Type, task.Handler, typ)
	}
	return j, nil
}

// stepName names a task's step in errors and run ids: STEP, or STEP#ITEM for a child.
func stepName(task *protocol.Task) string {
	if task.Item >= 0 && task.Body != task.Step {
		return task.Step + "#" + strconv.Itoa(task.Item)
	}
	return task.Step
}

// answerErr answers a task that went wrong: a permanent error fails it for good, any other
// fails the attempt (the engine's retry policy decides what follows).
func answerErr(t Task, err error) error {
	if p := (permanent{}); errors.As(err, &p) {
		return t.FailPermanent(p.err)
	}
	return t.Fail(err)
}

// inputText is the "Input:" part of a first message, or "" when the input is null or absent.
func inputText(input json.RawMessage) string {
	trimmed := bytes.TrimSpace(input)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return ""
	}
	var buf bytes.Buffer
	if json.Compact(&buf, trimmed) != nil {
		return "Input:\n" + string(trimmed)
	}
	return "Input:\n" + buf.String()
}

// joinParts joins the non-empty parts of a message with blank lines.
func joinParts(parts ...string) string {
	var b bytes.Buffer
	for _, p := range parts {
		if p == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(p)
	}
	return b.String()
}

// usageOf converts model usage to the engine's.
func usageOf(calls int, u model.Usage, cost float64) protocol.Usage {
	return protocol.Usage{ModelCalls: calls, InputTokens: int(u.InputTokens), OutputTokens: int(u.OutputTokens), CostUSD: cost}
}
