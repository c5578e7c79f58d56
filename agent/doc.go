// Package agent composes agents from smaller agents: leaves (an LLM agent running one bounded
// loop per invocation, a Func agent from a Go function, or any type implementing Agent) and
// composites (Sequential, Loop, Parallel) that run them in order, repeatedly or concurrently,
// passing state between them under explicit keys.
//
// It owns the composition: the tree of agents and its checks (unique names, non-empty
// composites), the event stream of a run (every start, loop iteration, message, state write,
// escalation and end is an Event, in order, with its author), the scoping of escalations, the
// run's budget (turns, wall clock on an injected clock.Clock, tokens, cost), the Result and the
// cursor that makes a composition resumable one leaf turn at a time, which Handler uses to run
// it as a durable agent_loop step.
//
// It must not implement loop behaviour of its own (an LLM agent's budgets, validation, policy and
// stop reasons are package loop's), decide workflow routing or retries (package engine does),
// or touch NATS: durable mode goes through worker.TaskContext only (its checkpoints and
// answers).
//
// # Running
//
// A composition runs in process with Run (or a composite's own Run method, which is the same):
//
//	s := agent.NewSession("run-1", agent.Config{Budget: agent.Budget{MaxTurns: 20}})
//	s.Put("topic", "bounded agent loops")
//	for ev, err := range agent.Run(ctx, root, s) { ... }
//	res := s.Result() // why it ended, the state, turns and usage
//
// The same composition runs durably as an agent_loop step served by Handler(root, cfg): each
// task runs one leaf turn and checkpoints the cursor, the state written and the events.
//
// # Scoping of escalations
//
// A leaf escalates with an Event whose Escalate is set. Without a Target, the escalation ends the
// innermost Loop enclosing the leaf (or, when none encloses it, the whole run). With a Target, it
// ends the named Loop, which must enclose the leaf, and everything inside it. The agents between
// the leaf and that loop end with reason escalated; the loop's parent goes on. An escalation
// never ends a loop that does not enclose the leaf, and a Target that names no enclosing loop is
// an error of the run. docs/agents.md has every rule.
package agent
