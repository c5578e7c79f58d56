package workflow

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/reins-run/reins/clock"
)

// Builder builds a Definition in Go. It describes exactly what a workflow file describes: a
// definition built here and the same workflow loaded from TOML have the same canonical JSON and
// the same Hash.
//
//	wf := workflow.New("code-review")
//	wf.AgentLoop("review", "llm-review").
//		WithMaxIterations(10).
//		WithMaxDuration(5 * time.Minute).
//		WithLoopDelay(500 * time.Millisecond).
//		WithTimeout(30 * time.Second)
//	wf.Task("report", "report-writer")
//	wf.Edge("review", "report")
//	def, err := wf.Build()
//
// Steps and edges keep their declaration order. Nothing is checked until Build, which reports
// every problem at once, as the validator does for files. A Builder is not safe for concurrent
// use.
type Builder struct {
	def   Definition // top-level fields only; Steps and Edges are assembled by Build
	steps []*Step
	edges []*Edge
}

// New starts a workflow named name ([a-z0-9_-]+).
func New(name string) *Builder {
	return &Builder{def: Definition{Name: name}}
}

// Description sets the workflow's description.
func (b *Builder) Description(s string) *Builder { b.def.Description = s; return b }

// Deadline sets the wall-clock bound of a whole run (default one hour).
func (b *Builder) Deadline(d time.Duration) *Builder { b.def.Deadline = clock.Duration(d); return b }

// MaxSteps sets the backstop on executed steps per run (default 10000).
func (b *Builder) MaxSteps(n int) *Builder { b.def.MaxSteps = n; return b }

// Start sets the entry step (default: the only step with no incoming edge).
func (b *Builder) Start(id string) *Builder { b.def.Start = id; return b }

// Concurrency sets the workflow's concurrency key, as `concurrency = { key, limit }` does: at
// most limit runs with the same key, rendered from the run input when each starts (a template
// such as "{{input.customer_id}}", or "" for one key for the whole workflow), are active at
// once; the others queue, first started first served.
func (b *Builder) Concurrency(key string, limit int) *Builder {
	b.def.Concurrency = &Concurrency{Key: key, Limit: limit}
	return b
}

// InputSchema sets the JSON Schema every run input must match, as input_schema does
// ([Definition.CheckInput]).
func (b *Builder) InputSchema(schema json.RawMessage) *Builder {
	b.def.InputSchema = schema
	return b
}

// Model declares a named model configuration, as [models.NAME] does. Declaring a name again
// replaces it.
func (b *Builder) Model(name string, m ModelDef) *Builder {
	if b.def.Models == nil {
		b.def.Models = map[string]ModelDef{}
	}
	b.def.Models[name] = m
	return b
}

// Tool declares a named tool, as [tools.NAME] does. Declaring a name again replaces it.
func (b *Builder) Tool(name string, t ToolDef) *Builder {
	if b.def.Tools == nil {
		b.def.Tools = map[string]ToolDef{}
	}
	b.def.Tools[name] = t
	return b
}

// MCP declares an MCP server, as [mcp.NAME] does (honoured by reins run only: on a server, MCP
// servers are the operator's). Declaring a name again replaces it.
func (b *Builder) MCP(name string, m MCPDef) *Builder {
	if b.def.MCP == nil {
		b.def.MCP = map[string]MCPDef{}
	}
	m.Command = slices.Clone(m.Command)
	b.def.MCP[name] = m
	return b
}

// common holds what every step builder shares: the step it writes to and the concrete builder
// its methods return, so that chaining keeps the concrete type (wf.LLM(...).WithTimeout(d)
// still has WithPrompt).
type common[B any] struct {
	s    *Step
	self B
}

// add appends a step to b and returns the common part of its builder.
func add[B any](b *Builder, s Step, self B) common[B] {
	p := &s
	b.steps = append(b.steps, p)
	return common[B]{s: p, self: self}
}

// ID returns the step's id, for use in edges.
func (c common[B]) ID() string { return c.s.ID }

// WithTimeout bounds one attempt (one iteration for agent_loop; the wait for approval and
// wait_event).
func (c common[B]) WithTimeout(d time.Duration) B { c.s.Timeout = clock.Duration(d); return c.self }

// WithRetry sets the step's retry policy.
func (c common[B]) WithRetry(r Retry) B { c.s.Retry = &r; return c.self }

// WithInput sets what the step receives: a template or a dotted path (default: the output of
// the step that led here, or the run input for the start step).
func (c common[B]) WithInput(s string) B { c.s.Input = s; return c.self }

// WithBranch sets the dotted path into the step's output whose value is its branch label.
func (c common[B]) WithBranch(path string) B { c.s.Branch = path; return c.self }

// TaskStep builds a task step: a worker handler run once (with retries).
type TaskStep struct{ common[*TaskStep] }

// Task adds a task step that runs handler.
func (b *Builder) Task(id, handler string) *TaskStep {
	t := &TaskStep{}
	t.common = add(b, Step{ID: id, Type: Task, Handler: handler}, t)
	return t
}

// AgentLoopStep builds an agent_loop step: a worker handler run repeatedly until it completes,
// fails, or a bound is reached.
type AgentLoopStep struct{ common[*AgentLoopStep] }

// AgentLoop adds an agent_loop step that runs handler. It needs WithMaxIterations.
func (b *Builder) AgentLoop(id, handler string) *AgentLoopStep {
	t := &AgentLoopStep{}
	t.common = add(b, Step{ID: id, Type: AgentLoop, Handler: handler}, t)
	return t
}

// WithMaxIterations bounds the number of iterations (required, > 0).
func (t *AgentLoopStep) WithMaxIterations(n int) *AgentLoopStep { t.s.MaxIterations = n; return t }

// WithMaxDuration bounds the wall-clock time from the first iteration (default unlimited).
func (t *AgentLoopStep) WithMaxDuration(d time.Duration) *AgentLoopStep {
	t.s.MaxDuration = clock.Duration(d)
	return t
}

// WithLoopDelay spaces iterations by d.
func (t *AgentLoopStep) WithLoopDelay(d time.Duration) *AgentLoopStep {
	t.s.LoopDelay = clock.Duration(d)
	return t
}

// LLMStep builds an llm step: one model call.
type LLMStep struct{ common[*LLMStep] }

// LLM adds an llm step that calls the named model.
func (b *Builder) LLM(id, model string) *LLMStep {
	t := &LLMStep{}
	t.common = add(b, Step{ID: id, Type: LLM, Model: model}, t)
	return t
}

// WithPrompt sets the prompt template.
func (t *LLMStep) WithPrompt(s string) *LLMStep { t.s.Prompt = s; return t }

// WithInstructions sets the system instructions.
func (t *LLMStep) WithInstructions(s string) *LLMStep { t.s.Instructions = s; return t }

// WithOutputSchema requires the reply to be JSON valid under schema.
func (t *LLMStep) WithOutputSchema(schema json.RawMessage) *LLMStep {
	t.s.OutputSchema = schema
	return t
}

// WithOutputRepairs sets how many times an invalid reply is re-asked (default 2; 0 = never).
func (t *LLMStep) WithOutputRepairs(n int) *LLMStep { t.s.OutputRepairs = &n; return t }

// WithStream asks the model to stream its reply: each piece is published live to the run's
// watchers (GET /v1/runs/{id}/events), and the record is the same as without it.
func (t *LLMStep) WithStream() *LLMStep { t.s.Stream = true; return t }

// AgentStep builds an agent step: the built-in bounded tool-calling loop.
type AgentStep struct{ common[*AgentStep] }

// Agent adds an agent step on the named model.
func (b *Builder) Agent(id, model string) *AgentStep {
	t := &AgentStep{}
	t.common = add(b, Step{ID: id, Type: Agent, Model: model}, t)
	return t
}

// WithGoal sets the goal template (the first user message).
func (t *AgentStep) WithGoal(s string) *AgentStep { t.s.Goal = s; return t }

// WithInstructions sets the system instructions.
func (t *AgentStep) WithInstructions(s string) *AgentStep { t.s.Instructions = s; return t }

// WithTools sets the tools offered to the loop, by their declared names.
func (t *AgentStep) WithTools(names ...string) *AgentStep {
	t.s.Tools = slices.Clone(names)
	return t
}

// WithPolicy sets the tool policy.
func (t *AgentStep) WithPolicy(p Policy) *AgentStep { t.s.Policy = &p; return t }

// WithBudget sets the loop's budget; zero fields take the defaults of eval-fixtures.md.
func (t *AgentStep) WithBudget(bu Budget) *AgentStep { t.s.Budget = &bu; return t }

// WithContext sets the loop's context policy: the most input tokens one model call may carry,
// the strategy that keeps it under them, how many of the latest messages it never touches, and
// for strategy summarize the summarizer, a model of the workflow's [models].
func (t *AgentStep) WithContext(c Context) *AgentStep { t.s.Context = &c; return t }

// WithStream asks the model to stream its replies: each piece is published live to the run's
// watchers (GET /v1/runs/{id}/events), and the record is the same as without it.
func (t *AgentStep) WithStream() *AgentStep { t.s.Stream = true; return t }

// WithSession makes the step continue a conversation across runs: tmpl (a template such as
// "{{input.customer_id}}") is rendered when the step starts, and runs that render the same value
// share the conversation (docs/agents.md, Sessions). ttl is how long the session is kept after
// its last save (0: [DefaultSessionTTL]).
func (t *AgentStep) WithSession(tmpl string, ttl time.Duration) *AgentStep {
	t.s.Session, t.s.SessionTTL = tmpl, clock.Duration(ttl)
	return t
}

// WithOnNeedsHuman sets what the step does when its loop stops with needs_human without calls
// pending approval: "complete" (the default: the step completes with that stop reason) or
// "pause" (the step waits for a human's answer, and the next iteration goes on with it).
func (t *AgentStep) WithOnNeedsHuman(s string) *AgentStep { t.s.OnNeedsHuman = s; return t }

// WithApprovalTimeout bounds how long calls that need approval wait for a decision (default:
// until the run's deadline); then WithOnTimeout applies.
func (t *AgentStep) WithApprovalTimeout(d time.Duration) *AgentStep {
	t.s.ApprovalTimeout = clock.Duration(d)
	return t
}

// WithOnTimeout sets what an approval timeout means: "deny" (the default: every undecided call
// is denied and the loop goes on) or "fail" (the step fails).
func (t *AgentStep) WithOnTimeout(s string) *AgentStep { t.s.OnTimeout = s; return t }

// SwitchStep builds a switch step: it routes on the value at a dotted path.
type SwitchStep struct{ common[*SwitchStep] }

// Switch adds a switch step whose label is the value at expr.
func (b *Builder) Switch(id, expr string) *SwitchStep {
	t := &SwitchStep{}
	t.common = add(b, Step{ID: id, Type: Switch, Expr: expr}, t)
	return t
}

// ParallelStep builds a parallel step: branches run concurrently, outputs joined in order.
type ParallelStep struct{ common[*ParallelStep] }

// Parallel adds a parallel step whose branches are the given steps of this workflow.
func (b *Builder) Parallel(id string, stepIDs ...string) *ParallelStep {
	s := Step{ID: id, Type: Parallel}
	for _, sid := range stepIDs {
		s.Branches = append(s.Branches, Branch{Step: sid})
	}
	t := &ParallelStep{}
	t.common = add(b, s, t)
	return t
}

// WithStepBranch adds a branch that runs a step of this workflow.
func (t *ParallelStep) WithStepBranch(id string) *ParallelStep {
	t.s.Branches = append(t.s.Branches, Branch{Step: id})
	return t
}

// WithWorkflowBranch adds a branch that runs a workflow file (relative to this workflow's file).
func (t *ParallelStep) WithWorkflowBranch(file string) *ParallelStep {
	t.s.Branches = append(t.s.Branches, Branch{Workflow: file})
	return t
}

// WithMaxConcurrent bounds how many branches run at once.
func (t *ParallelStep) WithMaxConcurrent(n int) *ParallelStep { t.s.MaxConcurrent = n; return t }

// MapStep builds a map step: one step or sub-workflow per item of a list.
type MapStep struct{ common[*MapStep] }

// Map adds a map step over the list at the dotted path items. It needs WithMaxItems and one of
// WithStep or WithWorkflow.
func (b *Builder) Map(id, items string) *MapStep {
	t := &MapStep{}
	t.common = add(b, Step{ID: id, Type: Map, Items: items}, t)
	return t
}

// WithStep runs the given step of this workflow per item.
func (t *MapStep) WithStep(id string) *MapStep { t.s.Step = id; return t }

// WithWorkflow runs the given workflow file per item.
func (t *MapStep) WithWorkflow(file string) *MapStep { t.s.Workflow = file; return t }

// WithMaxItems bounds the number of items (required, > 0).
func (t *MapStep) WithMaxItems(n int) *MapStep { t.s.MaxItems = n; return t }

// WithMaxConcurrent bounds how many items run at once (default 4).
func (t *MapStep) WithMaxConcurrent(n int) *MapStep { t.s.MaxConcurrent = n; return t }

// CallStep builds a call step: another workflow file run as a sub-run.
type CallStep struct{ common[*CallStep] }

// Call adds a call step that runs the workflow file.
func (b *Builder) Call(id, file string) *CallStep {
	t := &CallStep{}
	t.common = add(b, Step{ID: id, Type: Call, Workflow: file}, t)
	return t
}

// ApprovalStep builds an approval step: a human decision, labelled approved or denied.
type ApprovalStep struct{ common[*ApprovalStep] }

// Approval adds an approval step that asks prompt (a template).
func (b *Builder) Approval(id, prompt string) *ApprovalStep {
	t := &ApprovalStep{}
	t.common = add(b, Step{ID: id, Type: Approval, Prompt: prompt}, t)
	return t
}

// WithOnTimeout sets what a timeout means: "deny" (label denied) or "fail".
func (t *ApprovalStep) WithOnTimeout(s string) *ApprovalStep { t.s.OnTimeout = s; return t }

// WithApprovers names who may decide: principals ("alice") or roles ("role:finance").
func (t *ApprovalStep) WithApprovers(names ...string) *ApprovalStep {
	t.s.Approvers = slices.Clone(names)
	return t
}

// WaitEventStep builds a wait_event step: it waits for a named signal sent to the run.
type WaitEventStep struct{ common[*WaitEventStep] }

// WaitEvent adds a wait_event step for event.
func (b *Builder) WaitEvent(id, event string) *WaitEventStep {
	t := &WaitEventStep{}
	t.common = add(b, Step{ID: id, Type: WaitEvent, Event: event}, t)
	return t
}

// SleepStep builds a sleep step: a durable timer.
type SleepStep struct{ common[*SleepStep] }

// Sleep adds a sleep step that waits d.
func (b *Builder) Sleep(id string, d time.Duration) *SleepStep {
	t := &SleepStep{}
	t.common = add(b, Step{ID: id, Type: Sleep, Duration: clock.Duration(d)}, t)
	return t
}

// TerminateStep builds a terminate step: the run completes with its input as the result.
type TerminateStep struct{ common[*TerminateStep] }

// Terminate adds a terminate step.
func (b *Builder) Terminate(id string) *TerminateStep {
	t := &TerminateStep{}
	t.common = add(b, Step{ID: id, Type: Terminate}, t)
	return t
}

// FailStep builds a fail step: the run fails with message.
type FailStep struct{ common[*FailStep] }

// Fail adds a fail step.
func (b *Builder) Fail(id, message string) *FailStep {
	t := &FailStep{}
	t.common = add(b, Step{ID: id, Type: Fail, Message: message}, t)
	return t
}

// EdgeBuilder builds an edge.
type EdgeBuilder struct{ e *Edge }

// Edge adds an edge from one step to another; unconditional unless When is called.
func (b *Builder) Edge(from, to string) *EdgeBuilder {
	e := &Edge{From: from, To: to}
	b.edges = append(b.edges, e)
	return &EdgeBuilder{e: e}
}

// When makes the edge conditional: it is taken only when the step's label is label.
func (e *EdgeBuilder) When(label string) *EdgeBuilder { e.e.When = label; return e }

// MaxIterations makes the edge a loop edge, followed at most n times per run.
func (e *EdgeBuilder) MaxIterations(n int) *EdgeBuilder { e.e.MaxIterations = n; return e }

// Trigger adds a trigger, as [[triggers]] does: exactly one of t.Schedule, t.Subject and
// t.Webhook, named t.Name. Triggers keep their declaration order.
func (b *Builder) Trigger(t Trigger) *Builder {
	if t.CatchUp != nil {
		n := *t.CatchUp
		t.CatchUp = &n
	}
	b.def.Triggers = append(b.def.Triggers, t)
	return b
}

// Build assembles the definition, normalizes it (the defaults filled in) and
// validates it with Validate(def, Options{}): sub-workflow files resolve against the current
// directory and handlers are not checked. When there are problems, it returns nil and the
// Problems (use errors.As to get them).
func (b *Builder) Build() (*Definition, error) { return b.BuildWith(Options{}) }

// BuildWith is Build with validation options, for workflows whose sub-workflow files live
// elsewhere (BaseDir) or whose handlers must be checked (Handlers).
func (b *Builder) BuildWith(opts Options) (*Definition, error) {
	d, ps := b.definition()
	d.Normalize()
	ps = mergeProblems(ps, Validate(d, opts))
	valSort(ps) // as the validator orders them: by line (none here), then key
	if len(ps) > 0 {
		return nil, ps
	}
	return d, nil
}

// definition copies the builder's state into a fresh Definition that shares no memory with the
// builder, so a built definition never changes when the builder is used again. Raw JSON values
// are put in canonical form (sorted keys, no whitespace) as a file's would be. It returns the
// problems only the builder can see: raw JSON that does not parse (everything else is the
// validator's).
func (b *Builder) definition() (*Definition, Problems) {
	d := b.def
	d.Source, d.Steps, d.Edges = nil, nil, nil
	for _, s := range b.steps {
		d.Steps = append(d.Steps, *s)
	}
	for _, e := range b.edges {
		d.Edges = append(d.Edges, *e)
	}
	c := d.Clone()
	return c, c.canonicalRaws()
}

// canonicalRaws rewrites d's raw JSON values (schemas, mocks, scripts) in canonical form, in
// place, as a file's decoder writes them; a value that is not JSON stays as it is, reported
// under its key.
func (d *Definition) canonicalRaws() Problems {
	var ps Problems
	raw := func(key string, v *json.RawMessage) {
		c, err := canonicalRaw(*v)
		if err != nil {
			ps = append(ps, Problem{Code: EType, Key: key, Message: "is not valid JSON: " + err.Error()})
			return
		}
		*v = c
	}
	if d.InputSchema != nil {
		raw("input_schema", &d.InputSchema)
	}
	for _, name := range slices.Sorted(maps.Keys(d.Models)) {
		m := d.Models[name]
		raw("models."+name+".script", &m.Script)
		d.Models[name] = m
	}
	for _, name := range slices.Sorted(maps.Keys(d.Tools)) {
		t := d.Tools[name]
		raw("tools."+name+".input_schema", &t.InputSchema)
		raw("tools."+name+".mock", &t.Mock)
		d.Tools[name] = t
	}
	for i := range d.Steps {
		raw(fmt.Sprintf("steps[%d].output_schema", i), &d.Steps[i].OutputSchema)
	}
	return ps
}

// mergeProblems appends to ps the problems of more that ps does not already hold (same code and
// key), so that a problem both the builder and the validator see is reported once.
func mergeProblems(ps, more Problems) Problems {
	for _, p := range more {
		dup := false
		for _, q := range ps {
			if q.Code == p.Code && q.Key == p.Key {
				dup = true
				break
			}
		}
		if !dup {
			ps = append(ps, p)
		}
	}
	return ps
}
