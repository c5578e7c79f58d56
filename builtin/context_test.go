package builtin_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/protocol"
)

// contextWorkflow is an agent step reading five long log pages under a context policy, its
// summarizer the workflow's model "cheap".
func contextWorkflow(context string) string {
	page := fmt.Sprintf("%q", strings.Repeat("14:08 api-gw-1 WARN orders-db latency over budget. ", 40))
	var turns []string
	for p := range 5 {
		turns = append(turns, fmt.Sprintf(`{ tool_calls = [{ name = "read_page", arguments = { page = %d } }], usage = { input_tokens = 10, output_tokens = 5 } }`, p+1))
	}
	turns = append(turns, `{ text = "The incident began at 14:08." }`)
	return `name = "incident"
[models.main]
provider = "scripted"
script = ` + script(turns...) + `

[models.cheap]
provider = "scripted"
script = [{ text = "Pages 1 to 3: orders-db latency over budget from 14:08.", usage = { input_tokens = 700, output_tokens = 30 }, cost_usd = 0.001 }]

[tools.read_page]
description = "Read a page of the log."
mock = [{ output = { text = ` + page + ` } }]

[[steps]]
id = "investigate"
type = "agent"
model = "main"
instructions = "Read every page, then write the timeline."
goal = "Write the incident's timeline."
tools = ["read_page"]
context = ` + context + "\n"
}

// TestAgentContextPolicy: an agent step runs its loop under the step's context policy, one
// iteration per task, and its checkpoint stays append-only: each iteration's write continues
// the conversation where the last one ended, the view moving in the state alone. A summarizer's
// tokens and cost are in the usage the step reports.
func TestAgentContextPolicy(t *testing.T) {
	for _, tt := range []struct {
		name, context string
		check         func(t *testing.T, st *loop.State, usage protocol.Usage)
	}{
		{name: "drop_oldest", context: `{ max_tokens = 1500, keep_last = 2 }`,
			check: func(t *testing.T, st *loop.State, usage protocol.Usage) {
				if st.Context.From < 3 || usage.InputTokens != 50 {
					t.Errorf("view %+v, usage %+v: want turns left out, only the main model's tokens", st.Context, usage)
				}
			}},
		{name: "summarize", context: `{ max_tokens = 1500, strategy = "summarize", keep_last = 2, summarizer = "cheap" }`,
			check: func(t *testing.T, st *loop.State, usage protocol.Usage) {
				if !strings.HasPrefix(st.Context.Summary, "Pages 1 to 3") || st.Context.SummaryCalls == 0 {
					t.Errorf("view %+v: want the summarizer's summary", st.Context)
				}
				if usage.ModelCalls != 6 || usage.InputTokens != 50+700 || usage.OutputTokens != 25+30 || usage.CostUSD != 0.001 {
					t.Errorf("usage %+v: want the step's 6 model calls, and the summarizer's tokens and cost added", usage)
				}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, hash := bundleOf(t, contextWorkflow(tt.context), "")
			tasks := drive(t, newHandlers(t, builtin.Config{}), b, hash, `null`)
			last := tasks[len(tasks)-1]
			checkAgentOutput(t, last, "completed", "The incident began at 14:08.")
			var usage protocol.Usage
			n, summaries := 0, 0
			for i, ft := range tasks {
				usage.Add(ft.usage)
				var deltas []struct {
					From        int               `json:"from"`
					Messages    []json.RawMessage `json:"messages"`
					SameSummary bool              `json:"same_summary"`
					State       loop.State        `json:"state"`
				}
				if err := json.Unmarshal(ft.saved, &deltas); err != nil {
					t.Fatalf("iteration %d: checkpoint %s: %v", i+1, ft.saved, err)
				}
				d := deltas[len(deltas)-1]
				if d.From != n {
					t.Fatalf("iteration %d wrote the conversation from message %d, want %d: an earlier message changed", i+1, d.From, n)
				}
				n += len(d.Messages)
				// The summary is written once, by the iteration that made it.
				if d.State.Context.Summary != "" {
					summaries++
				}
				if d.SameSummary != (d.State.Context.Summary == "" && summaries > 0) {
					t.Errorf("iteration %d: same_summary %v with summary %q after %d summaries", i+1, d.SameSummary, d.State.Context.Summary, summaries)
				}
			}
			if tt.name == "summarize" && summaries != 1 {
				t.Errorf("the summary was written %d times, want once", summaries)
			}
			st, err := builtin.DecodeAgentState(last.saved)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Messages) != n || n != 12 {
				t.Errorf("%d messages in the state, %d written; want all 12", len(st.Messages), n)
			}
			tt.check(t, st, usage)
		})
	}
}

// TestDecodeAgentStateSummary: a write marked same_summary keeps the summary of the write
// before it; a write without it has its own (none included).
func TestDecodeAgentStateSummary(t *testing.T) {
	write := func(from int, content, summary string, same bool) string {
		return fmt.Sprintf(`{"from":%d,"messages":[{"role":"user","content":%q}],"same_summary":%v,"state":{"context":{"summary":%q}}}`, from, content, same, summary)
	}
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"kept", []string{write(0, "a", "", false), write(1, "b", "s1", false), write(2, "c", "", true), write(3, "d", "", true)}, "s1"},
		{"replaced", []string{write(0, "a", "s1", false), write(1, "b", "", true), write(2, "c", "s2", false), write(3, "d", "", true)}, "s2"},
		{"none", []string{write(0, "a", "", false), write(1, "b", "", false)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := builtin.DecodeAgentState(json.RawMessage("[" + strings.Join(tc.writes, ",") + "]"))
			if err != nil {
				t.Fatal(err)
			}
			if st.Context.Summary != tc.want || len(st.Messages) != len(tc.writes) {
				t.Errorf("summary %q and %d messages, want %q and %d", st.Context.Summary, len(st.Messages), tc.want, len(tc.writes))
			}
		})
	}
}
