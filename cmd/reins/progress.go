package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/template"
	"github.com/reins-run/reins/trace"
	"github.com/reins-run/reins/workflow"
)

// builtinHandlers are the handlers of the built-in step types.
var builtinHandlers = []string{protocol.HandlerLLM, protocol.HandlerAgent}

// runProgress prints a run's progress: a line when a step starts or ends (from the saves of
// its record), and for every iteration of an agent or agent_loop step what it did (from the
// answers in the run's events, which progress reads in order, missing none); for other steps,
// their failed attempts.
type runProgress struct {
	w     io.Writer
	def   *workflow.Definition
	quiet bool
	seen  map[string]engine.StepRun
	// answers holds, for each step key, the last answer of each activation whose end the saves
	// of the record have not shown yet: it tells how that activation ended if they never do.
	answers map[string][]kept
	// answered counts the answers read, to order the lines of missed ends as they happened.
	answered int
}

// kept is an answer kept in runProgress.answers, with the count of answers read up to it.
type kept struct {
	ev  *protocol.Event
	seq int
}

// missed is a line of a step's missed end or skipped activation, with its place among the
// others of one read (seq: twice the kept answer's, less one for a running line).
type missed struct {
	seq  int
	line string
}

func newProgress(w io.Writer, def *workflow.Definition, quiet bool) *runProgress {
	return &runProgress{w: w, def: def, quiet: quiet, seen: map[string]engine.StepRun{}, answers: map[string][]kept{}}
}

// update prints the steps whose status or activation changed in rec. A parallel or map step
// that ended prints after its children's lines of the same save, so that it never reads as
// ending before them.
func (p *runProgress) update(rec *client.Record) {
	if p.quiet || rec == nil || rec.Run == nil {
		return
	}
	parent, parentLine := "", ""
	flush := func() {
		if parentLine != "" {
			fmt.Fprintln(p.w, parentLine)
		}
		parent, parentLine = "", ""
	}
	order := client.StepOrder(p.def, rec.Run)
	// The ends missed first, in the order their answers came: a loop edge ends a step before it
	// starts the next one again.
	var lines []missed
	for _, key := range order {
		if old, had := p.seen[key]; had {
			lines = append(lines, p.missedEnd(key, old, *rec.Run.Steps[key])...)
		}
	}
	p.printMissed(lines)
	for _, key := range order {
		if parentLine != "" && !strings.HasPrefix(key, parent+"#") {
			flush()
		}
		sr := rec.Run.Steps[key]
		old, had := p.seen[key]
		p.seen[key] = *sr
		p.dropAnswers(key, *sr)
		if sr.Status == protocol.StepPending || sr.Status == protocol.StepSkipped {
			continue
		}
		if had && old.Status == sr.Status && old.Activation == sr.Activation {
			continue
		}
		if sr.Children > 0 && finished(sr.Status) {
			parent, parentLine = key, stepLine(key, sr)
			continue
		}
		fmt.Fprintln(p.w, stepLine(key, sr))
	}
	flush()
}

// finished reports whether a step's status is an end.
func finished(s protocol.StepStatus) bool {
	return s == protocol.StepCompleted || s == protocol.StepFailed || s == protocol.StepSkipped || s == protocol.StepCancelled
}

// missedEnd prints how the activation of old ended when the step is seen next (now) reset by
// a loop edge or at a later activation, its end never shown: the watch of the record keeps only
// the last save, so a step that ends and starts again between two reads would otherwise read as
// starting twice. Its last answer says how it ended.
func (p *runProgress) missedEnd(key string, old, now engine.StepRun) []missed {
	if now.Activation <= old.Activation && now.Status != protocol.StepPending {
		return nil
	}
	var lines []missed
	if old.Status != protocol.StepPending && !finished(old.Status) {
		lines = append(lines, p.endOf(key, old.Activation))
	}
	// Whole activations the watch skipped between the two reads, known by their answers.
	last := now.Activation - 1
	if now.Status == protocol.StepPending {
		last = now.Activation
	}
	for a := old.Activation + 1; a <= last; a++ {
		if k, ok := p.answerOf(key, a); ok {
			lines = append(lines, missed{2*k.seq - 1, stepLine(key, &engine.StepRun{Status: protocol.StepRunning, Activation: a})}, p.endOf(key, a))
		}
	}
	return lines
}

// endOf is the end of activation a of the step, as its last answer tells it (completed when
// none is kept: the step started again, so that activation ended; first among the lines).
func (p *runProgress) endOf(key string, a int) missed {
	end := engine.StepRun{Status: protocol.StepCompleted, Activation: a}
	k, ok := p.answerOf(key, a)
	if ok {
		ev := k.ev
		end.Label, end.StopReason, end.Error = p.label(ev), ev.StopReason, ev.Error
		if ev.Type == protocol.EvFailed || ev.Type == protocol.EvTimedOut {
			end.Status = protocol.StepFailed
		}
	}
	return missed{2 * k.seq, stepLine(key, &end)}
}

// printMissed prints lines in the order their answers came.
func (p *runProgress) printMissed(lines []missed) {
	slices.SortStableFunc(lines, func(a, b missed) int { return cmp.Compare(a.seq, b.seq) })
	for _, m := range lines {
		fmt.Fprintln(p.w, m.line)
	}
}

// progressClip bounds the texts of a progress line.
const progressClip = 100

// event prints what an answer says: an iteration of a looping step, or a failed attempt.
func (p *runProgress) event(ev *protocol.Event) {
	if p.quiet || !client.IsAnswer(ev) {
		return
	}
	key := protocol.StepKey(ev.Step, ev.Item)
	p.keepAnswer(key, ev)
	looping := false
	if st := p.def.StepByID(stepBody(p.def, ev)); st != nil {
		looping = st.Type == workflow.Agent || st.Type == workflow.AgentLoop
	}
	failed := ev.Type == protocol.EvFailed || ev.Type == protocol.EvTimedOut
	if !looping && !failed {
		return
	}
	p.started(key, ev.Activation)
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s iteration %d", key, ev.Iteration)
	if ev.Attempt > 1 {
		fmt.Fprintf(&b, " attempt %d", ev.Attempt)
	}
	fmt.Fprintf(&b, " %s", ev.Type)
	if ev.Usage != nil {
		b.WriteString(usageText(*ev.Usage))
	}
	if ev.Error != "" {
		fmt.Fprintf(&b, ": %s", trace.ClipText(ev.Error, progressClip))
	}
	fmt.Fprintln(p.w, b.String())
	if ev.Record != nil {
		for _, line := range progressLines(ev.Record) {
			fmt.Fprintf(p.w, "%-20s   %s\n", "", line)
		}
	}
}

// keepAnswer keeps ev as the last answer of its activation.
func (p *runProgress) keepAnswer(key string, ev *protocol.Event) {
	p.answered++
	k := kept{ev, p.answered}
	evs := p.answers[key]
	if n := len(evs); n > 0 && evs[n-1].ev.Activation == ev.Activation {
		evs[n-1] = k
		return
	}
	p.answers[key] = append(evs, k)
}

// answerOf is the last answer kept of activation a of the step.
func (p *runProgress) answerOf(key string, a int) (kept, bool) {
	for _, k := range p.answers[key] {
		if k.ev.Activation == a {
			return k, true
		}
	}
	return kept{}, false
}

// dropAnswers forgets the answers of the activations whose end is behind the save sr, so that
// what is kept stays bounded by what the watch skipped.
func (p *runProgress) dropAnswers(key string, sr engine.StepRun) {
	evs := p.answers[key]
	i := 0
	for i < len(evs) && (evs[i].ev.Activation < sr.Activation || evs[i].ev.Activation == sr.Activation && finished(sr.Status)) {
		i++
	}
	if i == len(evs) {
		delete(p.answers, key)
		return
	}
	p.answers[key] = evs[i:]
}

// label is the label the engine gives the step of answer ev, as far as the answer tells: its
// own, else the value at the step's branch path of its output, else its stop reason.
func (p *runProgress) label(ev *protocol.Event) string {
	if ev.Label != "" || ev.Type != protocol.EvCompleted {
		return ev.Label
	}
	if st := p.def.StepByID(stepBody(p.def, ev)); st != nil && st.Branch != "" {
		if v, err := template.Relative(ev.Output, st.Branch); err == nil {
			if l, err := template.Label(v); err == nil {
				return l
			}
		}
	}
	return ev.StopReason
}

// started prints a step's running line before its first answer when the saves of its record
// have not shown it running yet: the record and the events are read apart, and a watch of the
// record may see its first save after the answer it waits for, or only a later one.
func (p *runProgress) started(key string, activation int) {
	old, had := p.seen[key]
	if had && old.Activation >= activation && old.Status != protocol.StepPending {
		return
	}
	sr := engine.StepRun{Status: protocol.StepRunning, Activation: activation}
	if had {
		p.printMissed(p.missedEnd(key, old, sr))
	}
	p.seen[key] = sr
	fmt.Fprintln(p.w, stepLine(key, &sr))
}

// stepBody is the step an answer's task ran: a child's branch or map body, else the step.
func stepBody(def *workflow.Definition, ev *protocol.Event) string {
	parent := def.StepByID(ev.Step)
	switch {
	case ev.Item < 0 || parent == nil:
		return ev.Step
	case parent.Step != "": // map
		return parent.Step
	case ev.Item < len(parent.Branches):
		return parent.Branches[ev.Item].Step
	}
	return ev.Step
}

// progressLines says in a few short lines what a recorded iteration did: the proposal, each
// call and what came of it, the stop.
func progressLines(r *trace.Iteration) []string {
	var out []string
	for _, c := range r.Context {
		out = append(out, "context: "+trace.ClipText(c, progressClip))
	}
	if p := r.Proposal; p != nil && p.Kind != string(model.KindToolCalls) {
		line := p.Kind
		// An escalation or refusal says why in Reason (its Text repeats it, tagged for the
		// model's conversation); an answer has only Text.
		text := p.Reason
		if text == "" {
			text = p.Text
		}
		if text != "" {
			line += ": " + trace.ClipText(strings.Join(strings.Fields(text), " "), progressClip)
		}
		if p.Decision == trace.DecisionInvalid {
			line += " [rejected: " + p.Why + "]"
		}
		out = append(out, line)
	}
	if p := r.Proposal; p != nil && p.Decision == trace.DecisionTruncated {
		out = append(out, "cut off: "+trace.ClipText(p.Why, progressClip))
	}
	for i := range r.Calls {
		c := &r.Calls[i]
		line := c.Tool + " " + trace.ClipText(c.Arguments, progressClip/2) + " → "
		switch {
		case c.Executed && c.Error == "":
			line += fmt.Sprintf("ok, %d bytes", c.OutputBytes)
		case c.Executed:
			line += "failed: " + trace.ClipText(c.Error, progressClip)
		case c.Approval == "pending":
			line += "waits for a human decision"
		case c.SubRun:
			line += "runs as a sub-run"
		case c.Approval == "denied":
			line += "denied by " + c.By
		case c.Decision != "" && c.Decision != trace.DecisionAccept && c.Decision != trace.DecisionApprove:
			line += c.Decision + ": " + trace.ClipText(c.Reason, progressClip)
		default:
			// The loop's result of a call it did not run says so already ("not executed: why").
			line += "not executed: " + trace.ClipText(strings.TrimPrefix(c.Output, "not executed: "), progressClip)
		}
		out = append(out, line)
	}
	if r.StopReason != "" {
		out = append(out, "stop: "+r.StopReason+": "+trace.ClipText(r.StopDetail, progressClip))
	}
	return out
}

// stepLine describes a step's state in one line.
func stepLine(key string, sr *engine.StepRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s %-9s", key, sr.Status)
	if sr.Iteration > 1 && sr.Status != protocol.StepRunning { // a running step's iterations print as they end
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
	return strings.TrimRight(b.String(), " ")
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
	if c := res.Concurrency; c != nil {
		if res.Status == protocol.RunQueued {
			fmt.Fprintf(w, "  queued for a slot of concurrency key %q (limit %d): it starts when a run of that key ends\n", c.Key, c.Limit)
		} else {
			fmt.Fprintf(w, "  concurrency key %q (limit %d)\n", c.Key, c.Limit)
		}
	}
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
