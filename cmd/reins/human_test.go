package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

const (
	// gateApprovalWorkflow asks a person; approved ends the run completed, denied fails it
	// with the decision's message.
	gateApprovalWorkflow = `name = "gate_approval"

[[steps]]
id = "ask"
type = "approval"
prompt = "Ship order {{input.order_id}}?"

[[steps]]
id = "ship"
type = "terminate"

[[steps]]
id = "refuse"
type = "fail"
message = "not shipped: {{ask.output}}"

[[edges]]
from = "ask"
to = "ship"
when = "approved"

[[edges]]
from = "ask"
to = "refuse"
when = "denied"
`
	// holdWorkflow waits for the event "go" and ends with its data.
	holdWorkflow = `name = "hold"

[[steps]]
id = "hold"
type = "wait_event"
event = "go"
`
)

// pauseRun runs file on data until it waits and returns the waiting result.
func pauseRun(t *testing.T, file, data, id, input string) runResult {
	t.Helper()
	code, out, errOut := cli(t, "run", file, "--data", data, "--run-id", id, "--input", input, "--json", "--quiet")
	if code != 0 {
		t.Fatalf("reins run: exit %d\n%s%s", code, out, errOut)
	}
	res := decodeResult(t, out, "waiting")
	if res.Status != "waiting" {
		t.Fatalf("reins run ended %s; want waiting", res.Status)
	}
	return res
}

func TestApproveAndDenyApprovalStep(t *testing.T) {
	file := writeWorkflow(t, "wf.toml", gateApprovalWorkflow)
	for _, tc := range []struct {
		verb   string
		args   []string
		code   int
		status string
		label  string
	}{
		{"approve", nil, exitOK, "completed", "approved"},
		{"approve", []string{"ask"}, exitOK, "completed", "approved"},
		{"deny", []string{"ask", "--message", "the address is wrong"}, exitFailed, "failed", "denied"},
	} {
		t.Run(tc.verb+strings.Join(tc.args, "_"), func(t *testing.T) {
			data := t.TempDir()
			pauseRun(t, file, data, "gate-1", `{"order_id":"O-7"}`)
			var waiting struct {
				Waiting []struct {
					Step   string `json:"step"`
					Wait   string `json:"wait"`
					Prompt string `json:"prompt"`
				} `json:"waiting"`
			}
			_, out, errOut := cli(t, "runs", "show", "gate-1", "--data", data, "--json")
			if err := json.Unmarshal([]byte(out), &waiting); err != nil {
				t.Fatalf("runs show --json: %v\n%s%s", err, out, errOut)
			}
			if len(waiting.Waiting) != 1 || waiting.Waiting[0].Prompt != "Ship order O-7?" || waiting.Waiting[0].Wait != "approval" {
				t.Errorf("runs show: waiting %+v; want the approval step with its rendered prompt", waiting.Waiting)
			}
			args := append([]string{tc.verb, "gate-1"}, tc.args...)
			code, out, errOut := cli(t, append(args, "--data", data, "--json", "--quiet")...)
			if code != tc.code {
				t.Fatalf("reins %s: exit %d, want %d\n%s%s", tc.verb, code, tc.code, out, errOut)
			}
			res := decodeResult(t, out)
			if res.Status != tc.status {
				t.Errorf("run %s, want %s", res.Status, tc.status)
			}
			if got := res.step(t, "ask").Label; got != tc.label {
				t.Errorf("ask: label %q, want %q", got, tc.label)
			}
			if tc.status == "failed" && (res.Error == nil || !strings.Contains(res.Error.Message, "not shipped: the address is wrong")) {
				t.Errorf("run error %+v; want the fail step's message with the denial's message", res.Error)
			}
		})
	}
}

// TestSignalWaitEvent: reins signal names the data directory --data, as every command does,
// and the event's data --payload; --data-dir, its old name, still works (hidden).
func TestSignalWaitEvent(t *testing.T) {
	for _, dataFlag := range []string{"--data", "--data-dir"} {
		t.Run(dataFlag, func(t *testing.T) {
			data := t.TempDir()
			pauseRun(t, writeWorkflow(t, "wf.toml", holdWorkflow), data, "hold-1", "null")
			code, out, errOut := cli(t, "signal", "hold-1", "go", "--payload", `{"lot":7}`, dataFlag, data, "--json", "--quiet")
			if code != exitOK {
				t.Fatalf("reins signal: exit %d\n%s%s", code, out, errOut)
			}
			res := decodeResult(t, out)
			if res.Status != "completed" || compactJSON(res.Output) != `{"lot":7}` {
				t.Errorf("run %s with output %s; want completed with the event's data", res.Status, res.Output)
			}
		})
	}
}

func TestHumanCommandErrors(t *testing.T) {
	data := t.TempDir()
	pauseRun(t, writeWorkflow(t, "wf.toml", gateApprovalWorkflow), data, "gate-2", `{"order_id":"O-8"}`)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"deny without call", []string{"deny", "gate-2"}, exitUsage, "accepts 2 arg(s)"},
		{"unknown run", []string{"approve", "nope"}, exitFailed, "run nope"},
		{"unknown call", []string{"approve", "gate-2", "call_9"}, exitFailed, `run gate-2: no call or step "call_9" waits for approval`},
		{"nothing paused", []string{"resume", "gate-2", "--input", `"go on"`}, exitFailed, "run gate-2: no step waits for input"},
		{"resume input not JSON", []string{"resume", "gate-2", "--input", "go on"}, exitUsage, "--input is not JSON: invalid character"},
		{"signal payload not JSON", []string{"signal", "gate-2", "go", "--payload", "{"}, exitUsage, "--payload is not JSON: it ends inside an array or object (byte 1)"},
		{"signal data as the payload", []string{"signal", "gate-2", "go", "--data", `{"lot":7}`}, exitUsage, `--data names the data directory, and '{"lot":7}' is JSON, not a directory: give the event's data with --payload`},
		{"signal data and data-dir", []string{"signal", "gate-2", "go", "--data", `{"lot":7}`, "--data-dir", data}, exitUsage, "--data and --data-dir both name the data directory (--data-dir is its old name): give --data DIR, and the event's data with --payload JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if !slices.Contains(args, "--data") {
				args = append(args, "--data", data)
			}
			code, out, errOut := cli(t, args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, out, errOut)
			}
			assertNoStackTrace(t, errOut)
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr has no %q:\n%s", tc.want, errOut)
			}
		})
	}
	// The run still waits: none of the refused commands changed it.
	code, out, _ := cli(t, "runs", "list", "--data", data, "--json")
	if code != 0 || !strings.Contains(out, `"waiting"`) {
		t.Errorf("runs list: exit %d\n%s; want gate-2 still waiting", code, out)
	}
}

// TestWhere: the commands suggested for a waiting run name the server the run is on, as one
// shell word each.
func TestWhere(t *testing.T) {
	for _, tc := range []struct {
		flags natsFlags
		want  string
	}{
		{natsFlags{data: ".reins"}, ""},
		{natsFlags{data: "/tmp/x"}, " --data /tmp/x"},
		{natsFlags{data: "my runs"}, " --data 'my runs'"},
		{natsFlags{data: "it's"}, ` --data 'it'\''s'`},
		{natsFlags{url: "nats://u:secret@h:4222", data: "/tmp/x"}, " --nats nats://u:xxxxx@h:4222"},
	} {
		if got := tc.flags.where(); got != tc.want {
			t.Errorf("where of %+v = %q, want %q", tc.flags, got, tc.want)
		}
	}
}

// TestApproveKeepsTheRunsModel: a run started with --model PROVIDER:NAME names that model in
// its own definition, so reins approve, which takes no model flags, continues it on that model
// (at the --base-url the run was given, with the key of the environment), not on the file's.
func TestApproveKeepsTheRunsModel(t *testing.T) {
	const askThenWrite = `name = "ask_then_write"

[models.writer]
provider = "scripted"
script = [{ text = "from the scripted model" }]

[[steps]]
id = "ask"
type = "approval"
prompt = "Write?"

[[steps]]
id = "write"
type = "llm"
model = "writer"
prompt = "Write one line."

[[edges]]
from = "ask"
to = "write"
when = "approved"
`
	calls := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls <- r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1763740000,"model":"gpt-4.1-mini","choices":[{"index":0,"message":{"role":"assistant","content":"from the server"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}}`)
	}))
	t.Cleanup(srv.Close)
	data := t.TempDir()
	code, out, errOut := cli(t, "run", writeWorkflow(t, "wf.toml", askThenWrite), "--data", data, "--run-id", "ask-1", "--json", "--quiet",
		"--model", "openai:gpt-4.1-mini", "--base-url", srv.URL+"/v1", "--api-key", exampleKey)
	if code != exitOK || decodeResult(t, out, "waiting").Status != "waiting" {
		t.Fatalf("run: exit %d\n%s%s", code, out, errOut)
	}
	t.Setenv("OPENAI_API_KEY", exampleKey)
	code, out, errOut = cli(t, "approve", "ask-1", "ask", "--data", data, "--json", "--quiet")
	if code != exitOK {
		t.Fatalf("approve: exit %d\n%s%s", code, out, errOut)
	}
	if res := decodeResult(t, out); res.Status != "completed" || compactJSON(res.Output) != `"from the server"` {
		t.Errorf("run %s with output %s; want completed with the server's answer", res.Status, res.Output)
	}
	select {
	case auth := <-calls:
		if auth != "Bearer "+exampleKey {
			t.Errorf("the server got Authorization %q, want the key of the environment", auth)
		}
	default:
		t.Error("the continued run never called the model of --model")
	}
}
