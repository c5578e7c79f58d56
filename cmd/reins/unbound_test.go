package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// naiveRefiner is the evaluator–optimizer as one writes it first: the writer reads the critic's
// feedback, which does not exist on the first pass. %s is what the writer's prompt reads.
const naiveRefiner = `name = "naive_refiner"
start = "generate"

[models.writer]
provider = "scripted"
script = [{ text = "draft one" }, { text = "draft two" }]

[models.critic]
provider = "scripted"
script = [
  { text = '{"verdict": "retry", "feedback": "Shorter."}' },
  { text = '{"verdict": "accept", "feedback": "Good."}' },
]

[[steps]]
id = "generate"
type = "llm"
model = "writer"
prompt = 'Write about {{input.topic}}. Feedback: %s'

[[steps]]
id = "evaluate"
type = "llm"
model = "critic"
prompt = "Judge: {{generate.output}}"
output_schema = { type = "object", properties = { verdict = { type = "string", enum = ["accept", "retry"] }, feedback = { type = "string" } }, required = ["verdict", "feedback"], additionalProperties = false }
branch = "verdict"

[[steps]]
id = "publish"
type = "terminate"
input = "generate.output"

[[edges]]
from = "generate"
to = "evaluate"

[[edges]]
from = "evaluate"
to = "generate"
when = "retry"
max_iterations = 3

[[edges]]
from = "evaluate"
to = "publish"
when = "accept"
`

// refinerWithFeedback writes naiveRefiner with the writer's prompt reading feedback.
func refinerWithFeedback(t *testing.T, feedback string) (path string, promptLine int) {
	t.Helper()
	content := strings.Replace(naiveRefiner, "%s", feedback, 1)
	for i, l := range strings.Split(content, "\n") {
		if strings.HasPrefix(l, "prompt = 'Write about") {
			promptLine = i + 1
		}
	}
	return writeWorkflow(t, "refiner.toml", content), promptLine
}

// TestEvaluatorOptimizerNeedsDefault: reading the critic's feedback on the writer's first pass
// is refused by reins validate and by reins run, before any model is called, with the line of
// the prompt; with a default it validates and runs, the default standing for the feedback on the
// first pass and the critic's feedback on the second.
func TestEvaluatorOptimizerNeedsDefault(t *testing.T) {
	naive, line := refinerWithFeedback(t, "{{evaluate.output.feedback}}")
	want := naive + ":" + strconv.Itoa(line) + `: E_UNBOUND_REF steps[0].prompt: step "generate" reads {{evaluate.output.feedback}} in prompt, but step evaluate may not have run by then (a path from start skips it, or this is the first pass of a loop): give the template a default, {{evaluate.output.feedback ?? "..."}}`
	code, out, errOut := cli(t, "validate", naive)
	if code != exitFailed || lines(out)[0] != want || len(lines(out)) != 1 {
		t.Fatalf("validate: exit %d, want 1 and the one line\n%s\ngot:\n%s%s", code, want, out, errOut)
	}
	code, out, errOut = cli(t, "run", naive, "--input", `{"topic":"reins"}`, "--data", t.TempDir())
	if code != exitFailed || out != "" || !strings.Contains(errOut, want) || !strings.Contains(errOut, "is not a valid workflow") {
		t.Fatalf("run: exit %d, want 1, no run and the problem\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	fixed, _ := refinerWithFeedback(t, `{{evaluate.output.feedback ?? "none yet"}}`)
	if code, out, errOut := cli(t, "validate", fixed); code != exitOK {
		t.Fatalf("validate with a default: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = cli(t, "run", fixed, "--input", `{"topic":"reins"}`, "--data", t.TempDir(), "--json")
	if code != exitOK {
		t.Fatalf("run with a default: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	r := decodeResult(t, out)
	if want := []string{"generate", "evaluate", "generate", "evaluate", "publish"}; r.Status != "completed" || !slices.Equal(r.Path, want) || compactJSON(r.Output) != `"draft two"` {
		t.Errorf("status %s, path %v, output %s; want completed, %v, the second draft", r.Status, r.Path, r.Output, want)
	}

	// The same run on a model behind the OpenAI protocol shows the prompts the writer got.
	srv, prompts := refinerServer(t)
	code, out, errOut = cli(t, "run", fixed, "--input", `{"topic":"reins"}`, "--data", t.TempDir(), "--json",
		"--model", "openai:gpt-4.1-mini", "--base-url", srv.URL+"/v1", "--api-key", exampleKey)
	if code != exitOK {
		t.Fatalf("run on the protocol server: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if got, want := prompts(), []string{"Write about reins. Feedback: none yet", "Write about reins. Feedback: Shorter."}; !slices.Equal(got, want) {
		t.Errorf("the writer's prompts %q, want %q", got, want)
	}
}

// refinerServer answers Chat Completions for naiveRefiner: the critic asks for one rewrite, then
// accepts; the writer drafts. prompts returns the writer's prompts, in order.
func refinerServer(t *testing.T) (*httptest.Server, func() []string) {
	t.Helper()
	var (
		mu     sync.Mutex
		writer []string
		judged int
		reply  = func(w http.ResponseWriter, text string) {
			content, _ := json.Marshal(text)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1763740000,"model":"gpt-4.1-mini","choices":[{"index":0,"message":{"role":"assistant","content":`+string(content)+`},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":5,"total_tokens":25}}`)
		}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, `{"error":{"message":"unexpected request","type":"invalid_request_error"}}`, http.StatusBadRequest)
			return
		}
		prompt := req.Messages[len(req.Messages)-1].Content
		mu.Lock()
		defer mu.Unlock()
		if strings.HasPrefix(prompt, "Judge:") {
			judged++
			if judged == 1 {
				reply(w, `{"verdict": "retry", "feedback": "Shorter."}`)
			} else {
				reply(w, `{"verdict": "accept", "feedback": "Good."}`)
			}
			return
		}
		rendered, _, _ := strings.Cut(prompt, "\n\nInput:") // the step's input follows its prompt
		writer = append(writer, rendered)
		reply(w, "draft "+strconv.Itoa(len(writer)))
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(writer)
	}
}
