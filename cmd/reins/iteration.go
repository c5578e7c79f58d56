package main

import (
	"fmt"
	"io"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/trace"
)

// printIteration prints the parts of one iteration (reins runs show --iteration): each answer
// with what its record says the iteration did.
func printIteration(w io.Writer, runID, step string, n int, parts []client.IterationPart) {
	fmt.Fprintf(w, "run %s step %s iteration %d: %d answer(s)\n", runID, step, n, len(parts))
	for _, p := range parts {
		ev := &p.Event
		fmt.Fprintf(w, "%s: activation %d attempt %d", ev.Type, p.Activation, p.Attempt)
		if p.Resume > 0 {
			fmt.Fprintf(w, " resume %d (after what its calls waited for)", p.Resume)
		}
		fmt.Fprintf(w, " at %s", ev.At.Local().Format("15:04:05.000"))
		if r := ev.Record; r != nil && r.Duration > 0 {
			fmt.Fprintf(w, " in %s", r.Duration.Round(time.Millisecond))
		}
		fmt.Fprintln(w)
		if ev.Record != nil {
			for _, line := range recordLines(ev.Record, 0) {
				fmt.Fprintln(w, "  "+line)
			}
		}
		for _, c := range ev.Pending {
			fmt.Fprintf(w, "  waits: call %s %s for %s\n", c.CallID, c.Tool, pendingFor(c))
		}
		if ev.Usage != nil {
			fmt.Fprintf(w, "  usage:%s\n", usageText(*ev.Usage))
		}
		if len(ev.Output) > 0 && ev.Type != protocol.EvWaiting {
			fmt.Fprintf(w, "  output: %s\n", compactJSON(ev.Output))
		}
		if ev.StopReason != "" {
			fmt.Fprintf(w, "  stop: %s: %s\n", ev.StopReason, ev.StopDetail)
		}
		if ev.Error != "" {
			fmt.Fprintf(w, "  error: %s\n", ev.Error)
		}
	}
}

// pendingFor says what a pending call waits for: a human's decision, or its sub-run.
func pendingFor(c protocol.PendingCall) string {
	switch {
	case c.Child == nil:
		return "a human's decision"
	case c.Child.Agent != "":
		return "its sub-run (agent " + c.Child.Agent + ")"
	}
	return "its sub-run (workflow " + c.Child.Workflow + ")"
}

// recordLines describes a record, a line per fact; texts longer than clip bytes are cut (0:
// as the record holds them).
func recordLines(r *trace.Iteration, clip int) []string {
	cut := func(s string) string {
		if clip > 0 {
			return trace.ClipText(s, clip)
		}
		return s
	}
	var out []string
	if r.Recovered {
		out = append(out, "recovered from the checkpoint: the first answer of this part was lost, and with it its trace")
	}
	for _, c := range r.Context {
		out = append(out, "context: "+c)
	}
	if r.ModelCalls > 0 {
		out = append(out, fmt.Sprintf("model: %d call(s), %d in / %d out tokens, $%.4f, %s", r.ModelCalls, r.InputTokens, r.OutputTokens, r.CostUSD, r.ModelTime.Round(time.Millisecond)))
	}
	if p := r.Proposal; p != nil {
		line := "proposes " + p.Kind
		if p.Reason != "" {
			line += ": " + p.Reason
		}
		if p.Text != "" {
			line += ": " + cut(p.Text)
		}
		if p.Decision != "" {
			line += " [" + p.Decision
			if p.Why != "" {
				line += ": " + p.Why
			}
			line += "]"
		}
		out = append(out, line)
	}
	for _, m := range r.Messages {
		out = append(out, "message to the model: "+cut(m))
	}
	for i := range r.Calls {
		out = append(out, callLines(&r.Calls[i], cut)...)
	}
	if r.StopReason != "" {
		out = append(out, "loop stops: "+r.StopReason+": "+r.StopDetail)
	}
	return out
}

// callLines describes one call: what was proposed, decided, and what came of it.
func callLines(c *trace.CallRecord, cut func(string) string) []string {
	out := []string{fmt.Sprintf("call %s %s %s", c.ID, c.Tool, cut(c.Arguments))}
	if c.Decision != "" {
		line := "  validation: " + c.Decision
		if c.Reason != "" {
			line += ": " + c.Reason
		}
		out = append(out, line)
	}
	if c.Approval != "" {
		line := "  approval: " + c.Approval
		if c.By != "" {
			line += " by " + c.By
		}
		if c.Message != "" {
			line += ": " + c.Message
		}
		out = append(out, line)
	}
	switch {
	case c.Executed && c.Error == "":
		out = append(out, fmt.Sprintf("  executed in %s: ok, %d bytes", c.Duration.Round(time.Millisecond), c.OutputBytes))
	case c.Executed:
		out = append(out, fmt.Sprintf("  executed in %s: failed (retryable=%v): %s", c.Duration.Round(time.Millisecond), c.Retryable, c.Error))
	case c.SubRun:
		out = append(out, "  runs as a sub-run: its result is in the record of the iteration's resume")
	case c.Output != "" || c.Decision != "":
		out = append(out, "  not executed")
	}
	if c.Output != "" {
		out = append(out, "  result: "+cut(c.Output))
	}
	return out
}
