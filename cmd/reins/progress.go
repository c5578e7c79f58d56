package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// builtinHandlers are the handlers of the built-in step types.
var builtinHandlers = []string{protocol.HandlerLLM, protocol.HandlerAgent}

// runProgress prints one line per change of a step: started, a new iteration or attempt, ended.
type runProgress struct {
	w     io.Writer
	def   *workflow.Definition
	quiet bool
	seen  map[string]engine.StepRun
}

func newProgress(w io.Writer, def *workflow.Definition, quiet bool) *runProgress {
	return &runProgress{w: w, def: def, quiet: quiet, seen: map[string]engine.StepRun{}}
}

func (p *runProgress) update(rec *client.Record) {
	if p.quiet || rec == nil || rec.Run == nil {
		return
	}
	for _, key := range client.StepOrder(p.def, rec.Run) {
		sr := rec.Run.Steps[key]
		old, had := p.seen[key]
		p.seen[key] = *sr
		if sr.Status == protocol.StepPending || sr.Status == protocol.StepSkipped {
			continue
		}
		if had && old.Status == sr.Status && old.Activation == sr.Activation && old.Iteration == sr.Iteration && old.Attempt == sr.Attempt {
			continue
		}
		fmt.Fprintln(p.w, stepLine(key, sr))
	}
}

// stepLine describes a step's state in one line.
func stepLine(key string, sr *engine.StepRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s %-9s", key, sr.Status)
	if sr.Iteration > 1 || sr.Status == protocol.StepRunning && sr.Iteration > 0 {
		fmt.Fprintf(&b, " iteration %d", sr.Iteration)
	}
	if sr.Attempt > 1 {
		fmt.Fprintf(&b, " attempt %d", sr.Attempt)
	}
	b.WriteString(usageText(sr.Usage))
	if sr.Status == protocol.StepCompleted || sr.Status == protocol.StepFailed {
		if sr.StopReason != "" {
			fmt.Fprintf(&b, " stop=%s", sr.StopReason)
		}
		if sr.Label != "" {
			fmt.Fprintf(&b, " label=%s", sr.Label)
		}
		if sr.Error != "" {
			fmt.Fprintf(&b, " error: %s", sr.Error)
		}
	}
	return b.String()
}

func usageText(u protocol.Usage) string {
	var b strings.Builder
	if u.ToolCalls > 0 {
		fmt.Fprintf(&b, " tools=%d", u.ToolCalls)
	}
	if t := u.InputTokens + u.OutputTokens; t > 0 {
		fmt.Fprintf(&b, " tokens=%d", t)
	}
	if u.CostUSD > 0 {
		fmt.Fprintf(&b, " cost=$%.4f", u.CostUSD)
	}
	return b.String()
}

// printResult prints a run result as text or JSON.
func printResult(w io.Writer, res protocol.Result, asJSON bool) error {
	if asJSON {
		return printJSON(w, res)
	}
	fmt.Fprintf(w, "run %s %s\n", res.RunID, res.Status)
	for _, s := range res.Steps {
		fmt.Fprintf(w, "  %-20s %-9s", s.ID, s.Status)
		if s.StopReason != "" {
			fmt.Fprintf(w, " stop=%s", s.StopReason)
		}
		if s.Iterations > 0 {
			fmt.Fprintf(w, " iterations=%d", s.Iterations)
		}
		if s.Attempts > 0 {
			fmt.Fprintf(w, " attempts=%d", s.Attempts)
		}
		if s.Label != "" {
			fmt.Fprintf(w, " label=%s", s.Label)
		}
		if s.Usage != nil {
			fmt.Fprint(w, usageText(*s.Usage))
		}
		if s.Error != "" {
			fmt.Fprintf(w, " error: %s", s.Error)
		}
		fmt.Fprintln(w)
		if s.StopDetail != "" {
			fmt.Fprintf(w, "  %-20s %s\n", "", s.StopDetail)
		}
	}
	fmt.Fprintf(w, "path: %s\n", strings.Join(res.Path, " → "))
	if res.Error != nil {
		fmt.Fprintf(w, "error: %s\n", res.Error.Error())
	}
	fmt.Fprintf(w, "output: %s\n", compactJSON(res.Output))
	return nil
}

func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// printJSON writes v to w as indented JSON, the form of every --json output.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
