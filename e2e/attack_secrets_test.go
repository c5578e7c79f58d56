//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// echoKey is the operator's key of the provider that echoes it in successful replies.
const echoKey = "sk-echo-operator-key-5a4b3c2d1e0f9a8b"

// echoProvider is an OpenAI-compatible server whose every successful reply quotes the key it
// was sent, whole and cut, as a compromised or careless endpoint might: streamed in pieces that
// split it when the request asks for a stream.
func echoProvider(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		text := "You sent " + key + "; its start is " + key[:12] + "."
		var req struct {
			Stream bool `json:"stream"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		if !req.Stream {
			content, _ := json.Marshal(text)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":"gpt-echo","choices":[{"index":0,"message":{"role":"assistant","content":%s},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14}}`, content)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for len(text) > 0 {
			n := min(7, len(text)) // pieces of 7 bytes: no piece holds 8 bytes of the key
			content, _ := json.Marshal(text[:n])
			text = text[n:]
			fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-echo\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%s},\"finish_reason\":null}]}\n\n", content)
		}
		fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-echo\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
		fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-echo\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":9,\"total_tokens\":14}}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// echoWorkflow waits for bob's approval (so that the test reads the run's live stream before a
// model is called), then asks the echoing provider in a streamed llm step and in an agent step.
const echoWorkflow = `name = "echo"
deadline = "5m"

[models.m]
provider = "echo"
model = "gpt-echo"

[[steps]]
id = "gate"
type = "approval"
prompt = "Go?"
approvers = ["bob"]

[[steps]]
id = "ask"
type = "llm"
model = "m"
prompt = "Say something."
stream = true

[[steps]]
id = "investigate"
type = "agent"
model = "m"
goal = "Say something."

[[edges]]
from = "gate"
to = "ask"
when = "approved"

[[edges]]
from = "ask"
to = "investigate"
`

// TestAttackKeyInASuccessfulReply: a provider that echoes the operator's key in successful
// replies (an llm step that streams, an agent step) leaves nothing of it in any stream or
// bucket of the server, in the run the API answers, or in the live stream bob reads; the
// replies are kept with the key hidden.
func TestAttackKeyInASuccessfulReply(t *testing.T) {
	echo := echoProvider(t)
	h := hostileServer(t, fmt.Sprintf(`
[providers.echo]
kind = "openai"
base_url = %q
api_key_env = "ECHO_API_KEY"
`, echo.URL+"/v1"), "ECHO_API_KEY="+echoKey)
	h.register(attackBobToken, "echo", echoWorkflow)
	id := h.startAs(attackBobToken, "echo")

	// bob follows the run live, then lets it through.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", h.base+"/v1/runs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+attackBobToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if status, _, body := h.do(attackBobToken, "POST", "/v1/runs/"+id+"/approvals/gate", `{"decision":"approve"}`); status != http.StatusOK {
		t.Fatalf("approve: %d %s", status, body)
	}
	var live, deltas strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		live.WriteString(line + "\n")
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			event = name
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok && event == "delta" {
			var d struct {
				Text string `json:"text"`
			}
			_ = json.Unmarshal([]byte(data), &d)
			deltas.WriteString(d.Text)
		}
		if event == "end" && strings.HasPrefix(line, "data: ") {
			if !strings.Contains(line, `"completed"`) {
				t.Fatalf("the run ended %s", line)
			}
			break
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("the live stream broke: %v", err)
	}

	status, _, run := h.do(attackBobToken, "GET", "/v1/runs/"+id, "")
	if status != http.StatusOK {
		t.Fatalf("GET run: %d %s", status, run)
	}
	for what, text := range map[string]string{"the run the API answers": run, "the live stream": live.String()} {
		for _, piece := range []string{echoKey[:8], echoKey[9:17], echoKey[len(echoKey)-8:]} {
			if strings.Contains(text, piece) {
				t.Errorf("%s shows %q of the key:\n%s", what, piece, text)
			}
		}
	}
	if want := "You sent [redacted]; its start is [redacted]."; deltas.String() != want || !strings.Contains(run, want) {
		t.Errorf("the reply, kept with the key hidden: streamed %q, want %q in the deltas and the run", deltas.String(), want)
	}
	h.healthy()
	h.proc.signal(15) // SIGTERM: the store is flushed to its files
	<-h.proc.exited
	h.scan(echoKey, echoKey[:8], echoKey[9:17], echoKey[len(echoKey)-8:])
}
