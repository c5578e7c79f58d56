package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// loadOperator reads the operator's configuration of serve and worker (--config FILE, or the
// defaults of docs/reference/server.md) and the credentials it names: a missing environment
// variable or file fails here, at start, naming it.
func loadOperator(file string) (*operator.Config, *operator.Resolved, error) {
	cfg := operator.Default()
	if file != "" {
		var err error
		if cfg, err = operator.Load(file); err != nil {
			return nil, nil, err
		}
	}
	res, err := cfg.Resolve(nil, nil)
	if err != nil {
		return nil, nil, err
	}
	return cfg, res, nil
}

// rolesOf is the engine's runner.Config.Roles over res. The principal admin, when res does not
// know it (an external NATS server's user of that name: a configuration may not define one),
// holds the admin role, as an engine without Roles gives it.
func rolesOf(res *operator.Resolved) func(string) []string {
	return func(name string) []string {
		p, ok := res.Principal(name)
		switch {
		case !ok && name == operator.RoleAdmin:
			return []string{operator.RoleAdmin}
		case !ok:
			return nil
		}
		return p.Roles
	}
}

// admit is the engine's runner.Config.Admit of a server: a run's input within max_input_bytes,
// and workflows that set nothing only the operator may set and name only what the operator
// configured (operator.CheckWorkflow).
func admit(cfg *operator.Config) func(context.Context, []*workflow.Definition, json.RawMessage) *protocol.RunError {
	return func(_ context.Context, defs []*workflow.Definition, input json.RawMessage) *protocol.RunError {
		if limit := cfg.Limits.MaxInputBytes; limit > 0 && int64(len(input)) > limit {
			return &protocol.RunError{Code: protocol.CodeInputTooLarge, Message: fmt.Sprintf("the run input is %d bytes, more than the server's max_input_bytes of %d", len(input), limit)}
		}
		ps := operator.CheckWorkflow(cfg, defs...)
		if len(ps) == 0 {
			return nil
		}
		lines := make([]string, len(ps))
		for i, p := range ps {
			lines[i] = p.String()
		}
		return &protocol.RunError{Code: string(ps[0].Code), Message: "the server refused the workflow: " + strings.Join(lines, "; ")}
	}
}

// runLimits is the engine's runner.Config.Limits of a server: the operator's bounds on a run's
// growth, which every run it starts keeps.
func runLimits(cfg *operator.Config) engine.Limits {
	g := cfg.Limits.Growth
	return engine.Limits{MaxSteps: g.MaxSteps, MaxSignals: g.MaxSignalsPerRun, MaxEvents: g.MaxEventsPerRun}
}

// operatorOnly lists what the workflows of bs set that only a server's operator may set.
func operatorOnly(bs *workflow.Bundles) workflow.Problems {
	var ps workflow.Problems
	for _, h := range slices.Sorted(maps.Keys(bs.All)) {
		ps = append(ps, workflow.OperatorOnly(bs.All[h].Definition)...)
	}
	return ps
}

// printProblems prints one problem a line.
func printProblems(w io.Writer, ps workflow.Problems) {
	for _, p := range ps {
		fmt.Fprintln(w, p.String())
	}
}
