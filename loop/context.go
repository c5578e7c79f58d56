package loop

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/trace"
)

// ContextStrategy is how a context policy brings a model call that would carry too many input
// tokens under its limit.
type ContextStrategy string

// Context strategies.
const (
	// DropOldest leaves out the oldest messages after the goal, a whole turn at a time.
	DropOldest ContextStrategy = "drop_oldest"
	// TruncateToolResults shortens the oldest tool results first, then drops like DropOldest.
	TruncateToolResults ContextStrategy = "truncate_tool_results"
	// Summarize has the summarizer model summarize what it leaves out, and sends the summary in
	// its place; a summarizer that fails falls back to DropOldest.
	Summarize ContextStrategy = "summarize"
)

// ContextStrategies lists the strategies, the default first.
var ContextStrategies = []ContextStrategy{DropOldest, TruncateToolResults, Summarize}

// DefaultKeepLast is how many of the latest messages no strategy touches when
// ContextPolicy.KeepLast is 0.
const DefaultKeepLast = 4

// ContextPolicy bounds the input tokens of every model call of a run (docs/loop.md, "Context
// policy"). The zero value is no policy: every call carries the whole conversation.
type ContextPolicy struct {
	// MaxTokens is the most input tokens one model call may carry, as the loop counts them
	// (the provider's count of the last call plus an estimate of what was added since). It must
	// be positive when any other field is set.
	MaxTokens int64
	// Strategy is what brings a call over MaxTokens under it ("": DropOldest).
	Strategy ContextStrategy
	// KeepLast is how many of the latest messages no strategy touches (0: DefaultKeepLast).
	KeepLast int
	// Summarizer writes the summaries of Summarize, and is only allowed with it. Its tokens
	// and cost count against the run's budgets; its calls are not retried (a failure falls back
	// to DropOldest), pass through no Hooks and stream no deltas.
	Summarizer model.Model
}

// ContextView is what a context policy sends of a run's conversation: the goal (the first
// message, always), the summary if there is one, and the messages from From on, the tool results
// before TruncatedBefore shortened. Its indexes only move forward, so the conversation itself
// stays append-only (the durable agent step writes it as deltas). Input and Estimate, of the
// last successful model call, say how much the provider counts above the loop's estimate.
type ContextView struct {
	From            int    `json:"from,omitempty"`             // first message after the goal still sent (0: none left out)
	TruncatedBefore int    `json:"truncated_before,omitempty"` // tool results before this index are sent shortened
	Summary         string `json:"summary,omitempty"`          // stands for the messages left out
	SummaryCalls    int    `json:"summary_calls,omitempty"`    // summarizer calls, failed ones too: its Request.Seq
	Input           int64  `json:"input,omitempty"`            // the provider's input tokens of the last model call
	Estimate        int64  `json:"estimate,omitempty"`         // the loop's estimate of that call's input
}

// from is the index of the first message after the goal that is sent.
func (v *ContextView) from() int { return max(v.From, 1) }

// set reports whether p says anything; a policy that does must have MaxTokens.
func (p *ContextPolicy) set() bool {
	return p.MaxTokens != 0 || p.Strategy != "" || p.KeepLast != 0 || p.Summarizer != nil
}

// check returns p with its defaults applied, or what is wrong with it. fixed is the estimate of
// what every request carries besides its messages: the instructions and the tool definitions.
// A policy no request can meet, known now, is an error rather than a stop at the first call.
func (p ContextPolicy) check(fixed int64) (ContextPolicy, error) {
	if !p.set() {
		return p, nil
	}
	switch {
	case p.MaxTokens <= 0:
		return p, fmt.Errorf("%w: the context policy's max_tokens is %d: it must be positive", ErrConfig, p.MaxTokens)
	case p.Strategy != "" && !slices.Contains(ContextStrategies, p.Strategy):
		return p, fmt.Errorf("%w: the context policy's strategy %q is none of %s", ErrConfig, p.Strategy, strategyList())
	case p.KeepLast < 0:
		return p, fmt.Errorf("%w: the context policy's keep_last is %d: it must not be negative", ErrConfig, p.KeepLast)
	case p.Strategy == Summarize && p.Summarizer == nil:
		return p, fmt.Errorf("%w: the context policy's strategy summarize needs a summarizer model", ErrConfig)
	case p.Strategy != Summarize && p.Summarizer != nil:
		return p, fmt.Errorf("%w: the context policy has a summarizer, which only strategy summarize uses", ErrConfig)
	case fixed >= p.MaxTokens:
		return p, fmt.Errorf("%w: the instructions and tool definitions alone come to about %d input tokens, which leaves nothing of the context policy's max_tokens %d", ErrConfig, fixed, p.MaxTokens)
	}
	if p.Strategy == "" {
		p.Strategy = DropOldest
	}
	if p.KeepLast == 0 {
		p.KeepLast = DefaultKeepLast
	}
	return p, nil
}

func strategyList() string {
	names := make([]string, len(ContextStrategies))
	for i, s := range ContextStrategies {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// summaryShare is the part of MaxTokens that Summarize keeps for its summary: it leaves out
// what brings the request under MaxTokens minus MaxTokens/summaryShare. The room left over after
// a short summary lets the conversation grow for a while before the next summary, which costs
// a model call.
const summaryShare = 4

// fitContext sets the messages of the next request: the whole conversation without a policy;
// else the policy's view of it, which it first brings under the limit when it is over. It
// reports false when the run stopped instead (context_exhausted, or the context or the wall
// clock ended while a summarizer ran).
func (r *Run) fitContext(ctx context.Context, iter int, deadline time.Time) bool {
	if r.c.ctx.MaxTokens == 0 {
		r.req.Messages = r.st.Messages
		return true
	}
	w := &r.win
	w.sync(r.st)
	if before := r.counted(r.c.fixed + w.tokens); before > r.c.ctx.MaxTokens {
		if !r.applyContext(ctx, iter, deadline, before) {
			return false
		}
	}
	r.ctxRaw = r.c.fixed + w.tokens
	r.req.Messages = w.msgs
	return true
}

// counted is the loop's count of a request whose estimate is raw: the estimate plus what the
// provider counted above the loop's estimate at the last call. For an unchanged view that is
// the provider's count plus the estimate of what was added since; for a smaller one it stays
// conservative, whether the provider's excess grows with the text or is a fixed overhead (the
// framing of tools, say), which leaving messages out does not shrink.
func (r *Run) counted(raw int64) int64 {
	v := &r.st.Context
	if v.Input <= v.Estimate {
		return raw
	}
	if excess := v.Input - v.Estimate; raw < math.MaxInt64-excess {
		return raw + excess
	}
	return math.MaxInt64
}

// contextAct is what the policy did to one request, for its trace event.
type contextAct struct {
	before, after                  int64
	truncated, dropped, summarized int
	summary                        int64  // the new summary's tokens, as counted
	failure                        string // why the summarizer failed
	spent                          model.Usage
}

// applyContext brings the next request under the limit with the policy's strategy, emits a
// context event saying what it did, and stops the run with context_exhausted when even that is
// not enough.
func (r *Run) applyContext(ctx context.Context, iter int, deadline time.Time, before int64) bool {
	st, p, w := r.st, &r.c.ctx, &r.win
	a := contextAct{before: before}
	e := trace.Event{Type: trace.Context, Iteration: iter, Decision: string(p.Strategy)}
	raw := r.c.fixed + w.tokens
	called := false
	switch p.Strategy {
	case TruncateToolResults:
		a.truncated = r.truncateOldest(&raw)
	case Summarize:
		called = r.summarizeOldest(ctx, &raw, &a, &e)
	}
	a.dropped += r.dropOldest(&raw, p.MaxTokens)
	w.sync(st)
	a.after = r.counted(r.c.fixed + w.tokens)
	if called || a.truncated+a.dropped+a.summarized > 0 {
		e.InputTokens, e.OutputTokens = a.spent.InputTokens, a.spent.OutputTokens
		e.Reason = a.reason(p.MaxTokens)
		r.emit(e)
	}
	if called && r.stopAfterSummarizer(ctx, iter, deadline) {
		return false
	}
	if a.after <= p.MaxTokens {
		return true
	}
	kept := ""
	if st.Context.Summary != "" {
		kept = ", the summary"
	}
	r.stop(iter, ContextExhausted, fmt.Sprintf("the next model call would carry about %d input tokens, over the context policy's max_tokens %d, with nothing left that the policy may leave out: the goal, the instructions, the tools%s and the last %d messages",
		a.after, p.MaxTokens, kept, len(st.Messages)-st.Context.from()))
	return false
}

// stopAfterSummarizer stops the run, as after a model call, when its context or its wall clock
// ended while the summarizer ran: the model is not called then.
func (r *Run) stopAfterSummarizer(ctx context.Context, iter int, deadline time.Time) bool {
	if r.stopOnContext(ctx, iter) {
		return true
	}
	if !r.c.clock.Now().Before(deadline) {
		r.stop(iter, Timeout, fmt.Sprintf("the wall-clock budget of %s ran out while the summarizer ran", r.c.budget.MaxDuration))
		return true
	}
	return false
}

// reason is the one sentence of a context event.
func (a *contextAct) reason(limit int64) string {
	var did []string
	if a.summarized > 0 {
		did = append(did, fmt.Sprintf("summarized %d message(s) in about %d tokens (the summarizer used %d tokens)", a.summarized, a.summary, a.spent.Total()))
	}
	if a.truncated > 0 {
		did = append(did, fmt.Sprintf("truncated %d tool result(s)", a.truncated))
	}
	if a.dropped > 0 {
		did = append(did, fmt.Sprintf("left out %d message(s)", a.dropped))
	}
	if len(did) == 0 {
		did = append(did, "could leave nothing out")
	}
	s := strings.Join(did, ", then ")
	if a.failure != "" {
		s = "the summarizer failed: " + a.failure + "; fell back to drop_oldest and " + s
	}
	return fmt.Sprintf("%s: %d → %d input tokens (max_tokens %d)", s, a.before, a.after, limit)
}

// leaveOut says where the view would start, and the request's raw estimate then, once the
// oldest turns are left out until the request counts at most limit: a turn is an assistant
// message with the tool results that follow it (a provider rejects a result without its call),
// or any other message alone; the last KeepLast messages stay.
func (r *Run) leaveOut(raw, limit int64) (int, int64) {
	msgs := r.st.Messages
	keep := len(msgs) - r.c.ctx.KeepLast
	from := r.st.Context.from()
	for r.counted(raw) > limit {
		end := turnEnd(msgs, from)
		if end > keep {
			break
		}
		for i := from; i < end; i++ {
			raw -= r.sentTokens(i)
		}
		from = end
	}
	return from, raw
}

// turnEnd is the end of the turn that starts at message i: past the tool results after it.
func turnEnd(msgs []model.Message, i int) int {
	j := i + 1
	for j < len(msgs) && msgs[j].Role == model.RoleTool {
		j++
	}
	return j
}

// dropOldest leaves out the oldest turns until the request counts at most limit (see leaveOut)
// and returns how many messages it left out.
func (r *Run) dropOldest(raw *int64, limit int64) int {
	v := &r.st.Context
	from := v.from()
	to, left := r.leaveOut(*raw, limit)
	if to == from {
		return 0
	}
	v.From, *raw = to, left
	return to - from
}

// truncateOldest shortens the oldest tool results not yet shortened, outside the last KeepLast
// messages, until the request counts at most the limit, and returns how many it shortened.
func (r *Run) truncateOldest(raw *int64) int {
	st := r.st
	v := &st.Context
	keep := len(st.Messages) - r.c.ctx.KeepLast
	n, i := 0, max(v.TruncatedBefore, v.from())
	for ; i < keep && r.counted(*raw) > r.c.ctx.MaxTokens; i++ {
		m := &st.Messages[i]
		if !truncatable(m) {
			continue
		}
		short := shortened(*m)
		*raw -= estimate(m) - estimate(&short)
		n++
	}
	if n > 0 {
		v.TruncatedBefore = i
	}
	return n
}

// summarizeOldest replaces the oldest turns by a summary: those that must be left out for the
// request to fit with a summary of up to MaxTokens/summaryShare tokens, summarized with the
// summary so far by one summarizer call. On a failure (an error, no text, a summary that does
// not fit) the view is left as it was, for drop_oldest. It reports whether it called the
// summarizer.
func (r *Run) summarizeOldest(ctx context.Context, raw *int64, a *contextAct, e *trace.Event) bool {
	st, p := r.st, &r.c.ctx
	v := &st.Context
	from := v.from()
	room := p.MaxTokens / summaryShare
	to, left := r.leaveOut(*raw, p.MaxTokens-room)
	if to == from {
		return false // nothing may be left out: drop_oldest finds the same
	}
	text, err := r.summarize(ctx, from, to, room, a, e)
	var newRaw int64
	if err == nil {
		msg := summaryMessage(text)
		newRaw = left + estimate(&msg)
		if v.Summary != "" {
			old := summaryMessage(v.Summary)
			newRaw -= estimate(&old)
		}
		a.summary = r.counted(estimate(&msg))
		if after := r.counted(newRaw); after > p.MaxTokens {
			err = fmt.Errorf("its summary of about %d tokens leaves the request at %d, over max_tokens", a.summary, after)
		}
	}
	if err != nil {
		a.failure = err.Error()
		e.Decision, e.Error = string(DropOldest), err.Error()
		return true
	}
	v.Summary, v.From, *raw = text, to, newRaw
	a.summarized = to - from
	return true
}

// summarizerInstructions are the summarizer's system instructions.
const summarizerInstructions = "You summarize the earlier part of an AI agent's working conversation, which is about to be " +
	"left out of what the agent sees. Keep every fact, tool result, decision and open question the agent may still " +
	"need to reach its goal, with the exact identifiers and numbers; leave out everything else. Reply with the summary " +
	"only, as plain text."

// summarize asks the summarizer for a summary of messages [from, to) and the summary so far,
// its reply capped to room tokens and to what the budgets leave. Its tokens and cost are the
// run's, and go in a and e; its Request.Seq is State.Context.SummaryCalls.
func (r *Run) summarize(ctx context.Context, from, to int, room int64, a *contextAct, e *trace.Event) (string, error) {
	st, s := r.st, r.c.ctx.Summarizer
	req := model.Request{
		Instructions: summarizerInstructions,
		Messages:     []model.Message{{Role: model.RoleUser, Content: r.summaryInput(from, to)}},
		Seq:          st.Context.SummaryCalls,
	}
	limit, reason, detail := r.replyCap(s, model.EstimateInputTokens(&req))
	if reason != "" {
		return "", fmt.Errorf("the budgets leave no room for its call (%s)", detail)
	}
	req.MaxOutputTokens = room
	if limit > 0 {
		req.MaxOutputTokens = min(room, limit)
	}
	st.Context.SummaryCalls++
	start := r.c.clock.Now()
	resp, err := s.Generate(ctx, &req)
	e.Duration = r.c.clock.Now().Sub(start)
	if resp == nil && err == nil {
		err = errors.New("it returned neither a response nor an error")
	}
	if err != nil {
		return "", err
	}
	a.spent = resp.Usage
	st.Usage.InputTokens += resp.Usage.InputTokens
	st.Usage.OutputTokens += resp.Usage.OutputTokens
	st.CostUSD = model.AddCost(st.CostUSD, resp.CostUSD)
	e.CostUSD = resp.CostUSD
	p := &resp.Proposal
	text := strings.TrimSpace(p.Text)
	switch {
	case p.Kind != model.KindAnswer && (p.Kind != model.KindToolCalls || len(p.Calls) > 0):
		return "", fmt.Errorf("it proposed %s instead of a summary", p.Kind)
	case text == "":
		return "", errors.New("its summary is empty")
	}
	return text, nil
}

// summaryInput is the summarizer's user message: the goal, the summary so far, and messages
// [from, to) as the model was sent them.
func (r *Run) summaryInput(from, to int) string {
	st := r.st
	var b strings.Builder
	b.WriteString("The agent's goal:\n")
	b.WriteString(st.Goal)
	if st.Context.Summary != "" {
		b.WriteString("\n\nThe summary of the conversation before the messages below:\n")
		b.WriteString(st.Context.Summary)
	}
	b.WriteString("\n\nThe messages to summarize, oldest first:")
	for i := from; i < to; i++ {
		m := sentMessage(st, i)
		switch m.Role {
		case model.RoleTool:
			fmt.Fprintf(&b, "\n\n[result of %s, call %s]\n%s", m.Name, m.CallID, m.Content)
		case model.RoleAssistant:
			b.WriteString("\n\n[assistant]")
			if m.Content != "" {
				b.WriteString("\n" + m.Content)
			}
			for _, c := range m.Calls {
				fmt.Fprintf(&b, "\ncalls %s (call %s) with %s", c.Name, c.ID, c.Arguments)
			}
		default:
			b.WriteString("\n\n[" + string(m.Role) + "]\n" + m.Content)
		}
	}
	return b.String()
}

// summaryLabel starts the message that carries the summary, so the model knows what it reads.
const summaryLabel = "reins: the earlier part of this conversation was left out to fit the context limit; this is its summary:\n\n"

func summaryMessage(summary string) model.Message {
	return model.Message{Role: model.RoleUser, Content: summaryLabel + summary}
}

// truncHead is how many bytes of a shortened tool result are still sent; results up to twice
// that are never shortened, since the marker would save little.
const truncHead = 256

func truncatable(m *model.Message) bool {
	return m.Role == model.RoleTool && len(m.Content) > 2*truncHead
}

// shortened is a tool result as sent once truncated: its head, cut at a UTF-8 boundary, and a
// marker the model can read.
func shortened(m model.Message) model.Message {
	cut := truncHead
	for cut > 0 && !utf8.RuneStart(m.Content[cut]) {
		cut--
	}
	m.Content = m.Content[:cut] + fmt.Sprintf("\n…[reins: %d bytes of this tool result were left out to fit the context limit; the full result is in the iteration record]", len(m.Content)-cut)
	return m
}

// sentMessage is message i as the view sends it: shortened when it is a tool result before
// TruncatedBefore.
func sentMessage(st *State, i int) model.Message {
	m := st.Messages[i]
	if i < st.Context.TruncatedBefore && truncatable(&m) {
		return shortened(m)
	}
	return m
}

// sentTokens is the estimate of message i as the view sends it.
func (r *Run) sentTokens(i int) int64 {
	m := sentMessage(r.st, i)
	return estimate(&m)
}

// estimate is model.EstimateInputTokens of one message.
func estimate(m *model.Message) int64 {
	return model.EstimateInputTokens(&model.Request{Messages: []model.Message{*m}})
}
