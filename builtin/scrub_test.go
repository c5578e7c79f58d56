package builtin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/tool"
)

// echoedKey is the operator's key that the provider and a tool of TestOperatorModeScrubs
// echo in successful replies.
const echoedKey = "sk-operator-echoed-4f3e2d1c0b9a8796"

// toolCallCompletion is a chat completion proposing one call of name with args.
func toolCallCompletion(name, args string) string {
	a, _ := json.Marshal(args)
	return fmt.Sprintf(`{"id":"chatcmpl-2","object":"chat.completion","created":1700000000,"model":"gpt-test",`+
		`"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":%q,"arguments":%s}}]},"finish_reason":"tool_calls"}],`+
		`"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`, name, a)
}

// TestOperatorModeScrubs: on a server, a provider that echoes the operator's key in a
// successful reply (in its text and in a tool call's arguments) and a tool whose result and
// error hold it leave nothing of it in what the handlers answer, checkpoint and record; the
// same with reins run (no operator) keeps the text as it came.
func TestOperatorModeScrubs(t *testing.T) {
	toml := `name = "t"
[models.m]
provider = "corp"
model = "gpt-test"

[tools.lookup]
handler = "crm.lookup"
input_schema = { type = "object" }

[[steps]]
id = "investigate"
type = "agent"
model = "m"
goal = "Look it up."
tools = ["lookup"]

[[steps]]
id = "ask"
type = "llm"
model = "m"
prompt = "hi"
`
	lookup := tool.New(tool.Spec{Name: "lookup"}, func(context.Context, json.RawMessage, string) (json.RawMessage, error) {
		return json.RawMessage(`{"owner":"uses ` + echoedKey + `"}`), nil
	})
	srv := newChatServer(t,
		toolCallCompletion("lookup", `{"key":"`+echoedKey+`"}`),
		completion("The key was "+echoedKey[:20]+"… and "+echoedKey, 10, 5),
		completion("Your key: "+echoedKey, 10, 5))
	op := fakeOperator{
		providers: map[string]operator.Provider{"corp": {Kind: "openai", BaseURL: srv.URL + "/v1"}},
		keys:      map[string]string{"corp": echoedKey},
	}
	h := newHandlers(t, builtin.Config{Operator: op, Tools: map[string]tool.Tool{"crm.lookup": lookup}})
	b, hash := bundleOf(t, toml, "")
	tasks := drive(t, h, b, hash, "null")
	ask := newTask(b, hash, "ask", 1, "null")
	if err := h.LLM(ask); err != nil {
		t.Fatal(err)
	}
	tasks = append(tasks, ask)
	if last := tasks[len(tasks)-2]; last.answer != "complete" || last.stopReason != "completed" || ask.answer != "complete" {
		t.Fatalf("agent %s %s (%v), llm %s (%v)", last.answer, last.stopReason, last.err, ask.answer, ask.err)
	}
	var everything strings.Builder
	for _, ft := range tasks {
		recs, _ := json.Marshal(ft.records)
		fmt.Fprintf(&everything, "%s\n%s\n%s\n%v\n%s\n", ft.output, ft.saved, recs, ft.err, ft.stopDetail)
	}
	for _, piece := range []string{echoedKey[:8], echoedKey[10:18], echoedKey[len(echoedKey)-8:]} {
		if strings.Contains(everything.String(), piece) {
			t.Fatalf("the key's piece %q is stored:\n%s", piece, everything.String())
		}
	}
	if !strings.Contains(everything.String(), "Your key: [redacted]") || !strings.Contains(string(tasks[0].saved), "[redacted]") {
		t.Fatalf("the replies were not kept, scrubbed:\n%s", everything.String())
	}
}

// TestOperatorModeScrubsDeltas: a streamed reply that holds the operator's key, split across
// pieces, reaches readers with the key hidden, the rest of it as it came.
func TestOperatorModeScrubsDeltas(t *testing.T) {
	script := `[{ text = "Your key: ` + echoedKey + `, keep it." }]`
	b, hash := bundleOf(t, llmWorkflow(script, "stream = true"), "")
	var sink deltaSink
	h := newHandlers(t, builtin.Config{Operator: fakeOperator{keys: map[string]string{"corp": echoedKey}}, Deltas: sink.add})
	ft := newTask(b, hash, "write", 1, "null")
	if err := h.LLM(ft); err != nil {
		t.Fatal(err)
	}
	// The scripted model streams its reply in three pieces of 17 bytes: the key spans them.
	for _, d := range sink.ds {
		if strings.Contains(d.Text, echoedKey[:8]) || strings.Contains(d.Text, echoedKey[len(echoedKey)-8:]) {
			t.Errorf("a delta shows the key: %q", d.Text)
		}
	}
	if got := sink.text(1); got != "Your key: [redacted], keep it." {
		t.Errorf("streamed %q", got)
	}
	if string(ft.output) != `"Your key: [redacted], keep it."` {
		t.Errorf("output %s", ft.output)
	}
}
