// Package workflow is the model of a workflow as data: a predeclared graph of steps and edges,
// built with the Go builder (New) or loaded from a TOML file (Load), checked by the validator
// (Validate), serialized to canonical JSON with a content hash, and drawn as a graph (Mermaid,
// Graphviz dot). The file format is docs/reference/workflow-file.md; docs/workflows.md is the
// guide to writing workflows.
//
// The validator reports every problem in one pass, each with its stable code and the line of
// its key. Besides the structure (names, references, required keys, bounds, cycles without a
// loop edge, reachability), it checks what would otherwise fail only at run time, after model
// calls were paid for: a template or path reading the output of a step that may not have run
// by then, unless it gives a default (E_UNBOUND_REF: what every incoming edge guarantees on the
// first pass, a join waiting for its sources; validate_bound.go), and a branch or switch expr
// path that the output_schema of the step it reads cannot produce (E_BAD_BRANCH_PATH;
// validate_schema.go).
//
// It owns definitions, their validation and their export. It must not execute anything: running
// a definition is the engine's job, and nothing here talks to models, tools or NATS.
package workflow

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/protocol"
)

// StepType is the type of a step, as files write it: [protocol.StepType], which tasks carry.
type StepType = protocol.StepType

// Step types.
const (
	Task      StepType = "task"
	AgentLoop StepType = "agent_loop"
	LLM       StepType = "llm"
	Agent     StepType = "agent"
	Switch    StepType = "switch"
	Parallel  StepType = "parallel"
	Map       StepType = "map"
	Call      StepType = "call"
	Approval  StepType = "approval"
	WaitEvent StepType = "wait_event"
	Sleep     StepType = "sleep"
	Terminate StepType = "terminate"
	Fail      StepType = "fail"
)

// StepTypes lists every step type, in the reference's order.
var StepTypes = []StepType{Task, AgentLoop, LLM, Agent, Switch, Parallel, Map, Call, Approval, WaitEvent, Sleep, Terminate, Fail}

// Defaults and bounds of a workflow (docs/reference/workflow-file.md).
const (
	DefaultDeadline      = clock.Duration(3600e9) // "1h"
	DefaultMaxSteps      = 10000
	DefaultOutputRepairs = 2
	DefaultMapConcurrent = 4
	MaxCallDepth         = 8
)

// Definition is a whole workflow. Field order and JSON names are the canonical form: two
// definitions that mean the same thing marshal to the same bytes (see CanonicalJSON).
type Definition struct {
	Name        string         `json:"name"`
	Description string         `json:"description,omitempty"`
	Deadline    clock.Duration `json:"deadline"`
	MaxSteps    int            `json:"max_steps"`
	Start       string         `json:"start"`
	// Concurrency bounds the runs of this workflow that are active at once with the same key
	// (nil: no bound).
	Concurrency *Concurrency `json:"concurrency,omitempty"`
	// InputSchema is the JSON Schema every run input must match (nil: any input), checked
	// before a run starts (CheckInput).
	InputSchema json.RawMessage     `json:"input_schema,omitempty"`
	Models      map[string]ModelDef `json:"models,omitempty"`
	Tools       map[string]ToolDef  `json:"tools,omitempty"`
	MCP         map[string]MCPDef   `json:"mcp,omitempty"`
	Steps       []Step              `json:"steps"`
	Edges       []Edge              `json:"edges,omitempty"`
	// Triggers start runs by themselves (a schedule, a NATS subject, a webhook) once the
	// workflow is registered with a server; reins run ignores them.
	Triggers []Trigger `json:"triggers,omitempty"`

	// Source says where the definition was loaded from, for error positions; not part of the
	// canonical form.
	Source *Source `json:"-"`
}

// Concurrency is a workflow's concurrency key (`concurrency = { key, limit }`): at most Limit
// runs of the workflow with the same Key, rendered from each run's input when it starts, are
// active at once; the others are queued, first started first served, and each starts when a
// run of its key ends. Key may only read the run input (no step has run yet); an empty Key, or
// one without a template, is one key for every run of the workflow. The scope of a key is the
// workflow's name: every version of the workflow, started by any principal, shares it.
type Concurrency struct {
	Key   string `json:"key,omitempty"`
	Limit int    `json:"limit"`
}

// ModelDef is a named model configuration ([models.NAME]).
type ModelDef struct {
	Provider  string          `json:"provider" toml:"provider"` // openai | anthropic | scripted | replay
	Model     string          `json:"model,omitempty" toml:"model"`
	BaseURL   string          `json:"base_url,omitempty" toml:"base_url"`
	APIKeyEnv string          `json:"api_key_env,omitempty" toml:"api_key_env"`
	Script    json.RawMessage `json:"script,omitempty" toml:"-"` // provider scripted: turns as in eval-fixtures.md
	Cassette  string          `json:"cassette,omitempty" toml:"cassette"`
}

// ToolDef is a named tool ([tools.NAME]): served by a worker handler, mocked, served by an MCP
// server, or run as a durable child of the agent step that calls it (Agent, Workflow).
type ToolDef struct {
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	SideEffect  bool            `json:"side_effect,omitempty"`
	Handler     string          `json:"handler,omitempty"`
	Mock        json.RawMessage `json:"mock,omitempty"` // results as in eval-fixtures.md mocked_tools
	// MCP names the MCP server that serves the tool of the same name ([mcp.NAME] of the
	// workflow with reins run; the operator's on a server, docs/reference/server.md).
	MCP string `json:"mcp,omitempty"`
	// Agent names an agent step of this workflow that only runs as a child: each call of the
	// tool runs it as a sub-run of its own, the call's arguments its input, and its output is
	// the call's result (docs/agents.md, "Agents and workflows as tools").
	Agent string `json:"agent,omitempty"`
	// Workflow names a sub-workflow file, resolved as a call step's is, that each call of the
	// tool runs as a sub-run in the same way.
	Workflow string `json:"workflow,omitempty"`
	// Timeout bounds one call of the tool (zero: the server's limits.tool_timeout, a minute by
	// default). A side-effecting call runs on past the end of its attempt, up to it, so that
	// its result is recorded once (docs/engine.md, "Side effects, once per call").
	Timeout clock.Duration `json:"timeout,omitempty"`
}

// RunsChild reports whether calls of the tool run as sub-runs (Agent or Workflow) rather than
// on a worker.
func (t ToolDef) RunsChild() bool { return t.Agent != "" || t.Workflow != "" }

// MCPDef is an MCP server a workflow declares ([mcp.NAME]): a program started over stdio, or
// a streamable HTTP endpoint. Only reins run honours it: on a server, MCP servers are the
// operator's, and a submitted workflow that declares one is refused ([OperatorOnly]).
type MCPDef struct {
	Command []string `json:"command,omitempty"`
	URL     string   `json:"url,omitempty"`
}

// Retry is a step's retry policy.
type Retry struct {
	MaxAttempts  int            `json:"max_attempts"`
	Backoff      string         `json:"backoff"` // fixed | linear | exponential
	InitialDelay clock.Duration `json:"initial_delay,omitempty"`
	MaxDelay     clock.Duration `json:"max_delay,omitempty"`
}

// Branch is one branch of a parallel step: a step of this workflow, or a sub-workflow file.
type Branch struct {
	Step     string `json:"step,omitempty"`
	Workflow string `json:"workflow,omitempty"`
}

// Policy is an agent step's tool policy: the same file form as an eval fixture's.
type Policy = loop.PolicySpec

// Budget is an agent step's budget, keys as in eval-fixtures.md; zero means the default.
type Budget = loop.BudgetSpec

// Context is an agent step's context policy (docs/loop.md): max_tokens, strategy, keep_last,
// and the summarizer by the name of one of the workflow's [models].
type Context = loop.ContextSpec

// Step is one step. The common keys come first; each type uses only its own keys (see
// KeysOf), and the validator reports any other key set on it.
type Step struct {
	ID      string         `json:"id"`
	Type    StepType       `json:"type"`
	Timeout clock.Duration `json:"timeout,omitempty"`
	Retry   *Retry         `json:"retry,omitempty"`
	Input   string         `json:"input,omitempty"`
	Branch  string         `json:"branch,omitempty"`

	Handler       string          `json:"handler,omitempty"`        // task, agent_loop
	MaxIterations int             `json:"max_iterations,omitempty"` // agent_loop
	MaxDuration   clock.Duration  `json:"max_duration,omitempty"`   // agent_loop
	LoopDelay     clock.Duration  `json:"loop_delay,omitempty"`     // agent_loop
	Model         string          `json:"model,omitempty"`          // llm, agent
	Prompt        string          `json:"prompt,omitempty"`         // llm, approval
	Instructions  string          `json:"instructions,omitempty"`   // llm, agent
	OutputSchema  json.RawMessage `json:"output_schema,omitempty"`  // llm
	OutputRepairs *int            `json:"output_repairs,omitempty"` // llm (default 2)
	Goal          string          `json:"goal,omitempty"`           // agent
	Tools         []string        `json:"tools,omitempty"`          // agent
	Policy        *Policy         `json:"policy,omitempty"`         // agent
	Budget        *Budget         `json:"budget,omitempty"`         // agent
	Context       *Context        `json:"context,omitempty"`        // agent
	Expr          string          `json:"expr,omitempty"`           // switch
	Branches      []Branch        `json:"branches,omitempty"`       // parallel
	MaxConcurrent int             `json:"max_concurrent,omitempty"` // parallel, map (default 4)
	Items         string          `json:"items,omitempty"`          // map
	Step          string          `json:"step,omitempty"`           // map
	Workflow      string          `json:"workflow,omitempty"`       // map, call
	MaxItems      int             `json:"max_items,omitempty"`      // map
	OnTimeout     string          `json:"on_timeout,omitempty"`     // approval, agent: deny | fail
	// ApprovalTimeout bounds how long an agent's calls that need approval wait for a decision
	// (zero: until the run's deadline); then OnTimeout applies.
	ApprovalTimeout clock.Duration `json:"approval_timeout,omitempty"` // agent
	// OnNeedsHuman is what an agent step does when its loop stops with needs_human without
	// pending calls (escalation, repeated tool failures): "" or "complete" (the step completes
	// with that stop reason, for edges to route) or "pause" (the step waits for `reins resume`).
	OnNeedsHuman string         `json:"on_needs_human,omitempty"` // agent: complete | pause
	Event        string         `json:"event,omitempty"`          // wait_event
	Duration     clock.Duration `json:"duration,omitempty"`       // sleep
	Message      string         `json:"message,omitempty"`        // fail
	// Approvers names who may decide an approval step: principals ("alice") or roles
	// ("role:finance"); empty means any principal who may approve (docs/reference/server.md).
	Approvers []string `json:"approvers,omitempty"` // approval
	// Stream asks the model to stream its reply: the built-in handlers publish each piece live
	// (natsbox.Names.DeltaSubject), not kept; the record is the same as without it.
	Stream bool `json:"stream,omitempty"` // llm, agent
	// Session continues a conversation across runs (docs/agents.md, Sessions): a template
	// rendered when the step starts; the runs whose steps render the same value (within the
	// scope of the principal, the workflow's name and the step) share one conversation.
	Session string `json:"session,omitempty"` // agent
	// SessionTTL is how long a session is kept after the step last saved it (zero:
	// [DefaultSessionTTL]; at most MaxSessionTTL).
	SessionTTL clock.Duration `json:"session_ttl,omitempty"` // agent
}

// DefaultSessionTTL is how long a session is kept after its last save when the step gives no
// session_ttl; MaxSessionTTL is the most a step may give (the sessions bucket's max age).
const (
	DefaultSessionTTL = clock.Duration(30 * 24 * time.Hour)
	MaxSessionTTL     = clock.Duration(90 * 24 * time.Hour)
)

// Edge connects two steps. With When, it is taken only for that label; with MaxIterations, it
// is a loop edge followed at most that many times per run.
type Edge struct {
	From          string `json:"from"`
	To            string `json:"to"`
	When          string `json:"when,omitempty"`
	MaxIterations int    `json:"max_iterations,omitempty"`
}

// IsLoop reports whether e is a loop edge.
func (e Edge) IsLoop() bool { return e.MaxIterations != 0 }

// KeysOf lists the type-specific keys each step type accepts, in file spelling. Every step also
// accepts id, type, timeout, retry, input and branch.
var KeysOf = map[StepType][]string{
	Task:      {"handler"},
	AgentLoop: {"handler", "max_iterations", "max_duration", "loop_delay"},
	LLM:       {"model", "prompt", "instructions", "output_schema", "output_repairs", "stream"},
	Agent:     {"model", "instructions", "goal", "tools", "policy", "budget", "context", "on_needs_human", "approval_timeout", "on_timeout", "stream", "session", "session_ttl"},
	Switch:    {"expr"},
	Parallel:  {"branches", "max_concurrent"},
	Map:       {"items", "step", "workflow", "max_items", "max_concurrent"},
	Call:      {"workflow"},
	Approval:  {"prompt", "on_timeout", "approvers"},
	WaitEvent: {"event"},
	Sleep:     {"duration"},
	Terminate: {},
	Fail:      {"message"},
}

// CommonKeys are the keys every step accepts.
var CommonKeys = []string{"id", "type", "timeout", "retry", "input", "branch"}

// Source records where a definition came from: the file, and the line of each key, addressed
// like "steps[2].handler", "edges[0].to", "models.writer.provider" or "" for the file itself.
type Source struct {
	File  string
	Lines map[string]int
}

// Line returns the line of key, else of its nearest enclosing key that has one, else 0.
func (s *Source) Line(key string) int {
	if s == nil {
		return 0
	}
	for k := key; ; {
		if n, ok := s.Lines[k]; ok {
			return n
		}
		i := lastSep(k)
		if i < 0 {
			return 0
		}
		k = k[:i]
	}
}

// lastSep finds the end of the parent path of key ("steps[2].handler" → "steps[2]", "steps[2]" →
// "steps").
func lastSep(key string) int {
	for i := len(key) - 1; i >= 0; i-- {
		if key[i] == '.' || key[i] == '[' {
			return i
		}
	}
	return -1
}

// Normalize fills in the defaults so that every way of writing the same workflow has
// one canonical form: deadline, max_steps, the start step (the only step with no incoming edge,
// when there is exactly one), llm output_repairs, map max_concurrent, and the session_ttl
// of an agent step with a session. It changes d in place
// and leaves anything it cannot decide (an ambiguous start) for the validator to report.
func (d *Definition) Normalize() {
	if d.Deadline == 0 {
		d.Deadline = DefaultDeadline
	}
	if d.MaxSteps == 0 {
		d.MaxSteps = DefaultMaxSteps
	}
	if d.Start == "" {
		if roots := d.Roots(); len(roots) == 1 {
			d.Start = roots[0]
		}
	}
	for i := range d.Steps {
		s := &d.Steps[i]
		if s.Type == LLM && s.OutputRepairs == nil {
			n := DefaultOutputRepairs
			s.OutputRepairs = &n
		}
		if s.Type == Map && s.MaxConcurrent == 0 {
			s.MaxConcurrent = DefaultMapConcurrent
		}
		if s.Type == Agent && s.Session != "" && s.SessionTTL == 0 {
			s.SessionTTL = DefaultSessionTTL
		}
	}
	for i := range d.Triggers {
		d.Triggers[i].normalize()
	}
}

// Children lists the steps s starts itself rather than through an edge: its branches that are
// steps of this workflow, and the body step of a map. Roots, the validator's graph and the
// engine all treat them as linked to s.
func (s *Step) Children() []string {
	var children []string
	for _, b := range s.Branches {
		if b.Step != "" {
			children = append(children, b.Step)
		}
	}
	if s.Type == Map && s.Step != "" {
		children = append(children, s.Step)
	}
	return children
}

// Roots lists the steps with no incoming edge, in declaration order, not counting steps that
// are parallel branches or map bodies (their parent starts them) or that agent tools run.
func (d *Definition) Roots() []string {
	incoming := map[string]bool{}
	for _, e := range d.Edges {
		incoming[e.To] = true
	}
	for _, a := range d.ToolAgents() {
		incoming[a] = true
	}
	for i := range d.Steps {
		for _, c := range d.Steps[i].Children() {
			incoming[c] = true
		}
	}
	var roots []string
	for _, s := range d.Steps {
		if !incoming[s.ID] {
			roots = append(roots, s.ID)
		}
	}
	return roots
}

// CanonicalJSON is the definition's canonical form: normalized, struct fields in declaration
// order, map keys sorted, no insignificant whitespace. Builder and TOML definitions of the same
// workflow produce the same bytes.
func (d *Definition) CanonicalJSON() ([]byte, error) {
	c := *d
	c.Steps = append([]Step(nil), d.Steps...)
	c.Triggers = append([]Trigger(nil), d.Triggers...)
	c.Normalize()
	// Raw JSON values (schemas, mocks, scripts) are compared by meaning, not by how they were
	// written: keys sorted, numbers in one spelling. The copy gets fresh maps so d is untouched.
	var err error
	canon := func(v json.RawMessage) json.RawMessage {
		out, cerr := canonicalRaw(v)
		if cerr != nil && err == nil {
			err = cerr
		}
		return out
	}
	if d.Models != nil {
		c.Models = make(map[string]ModelDef, len(d.Models))
		for name, m := range d.Models {
			m.Script = canon(m.Script)
			c.Models[name] = m
		}
	}
	if d.Tools != nil {
		c.Tools = make(map[string]ToolDef, len(d.Tools))
		for name, t := range d.Tools {
			t.InputSchema, t.Mock = canon(t.InputSchema), canon(t.Mock)
			c.Tools[name] = t
		}
	}
	c.InputSchema = canon(c.InputSchema)
	for i := range c.Steps {
		c.Steps[i].OutputSchema = canon(c.Steps[i].OutputSchema)
	}
	if err != nil {
		return nil, fmt.Errorf("workflow %s: a raw JSON value is not valid JSON: %w", d.Name, err)
	}
	return json.Marshal(&c)
}

// Hash is the hex SHA-256 of the canonical JSON: a run records it to name the exact version of
// the definition it started with.
func (d *Definition) Hash() (string, error) {
	b, err := d.CanonicalJSON()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// StepByID returns the step with that id, or nil.
func (d *Definition) StepByID(id string) *Step {
	for i := range d.Steps {
		if d.Steps[i].ID == id {
			return &d.Steps[i]
		}
	}
	return nil
}

// canonicalRaw rewrites a raw JSON value in canonical form: object keys sorted, no whitespace,
// numbers written as encoding/json writes the integers and floats a TOML file decodes to. An
// empty value stays empty (absent).
func canonicalRaw(v json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(v)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("unexpected data after the value")
	}
	x = canonicalNumbers(x)
	return json.Marshal(x)
}

// canonicalNumbers replaces each json.Number by an int64 when it is one, else by a float64, so
// that 1, 1.0 and 1e0 all read back as the same value.
func canonicalNumbers(x any) any {
	switch v := x.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = canonicalNumbers(e)
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = canonicalNumbers(e)
		}
		return v
	case json.Number:
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return n
		}
		if f, err := strconv.ParseFloat(string(v), 64); err == nil && !math.IsInf(f, 0) {
			return f
		}
		return v
	}
	return x
}
