package eval_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reins-run/reins/eval"
	"github.com/reins-run/reins/tool"
)

func TestParseScriptAndMocks(t *testing.T) {
	tests := []struct {
		name, script, mock, wantErr string
	}{
		{name: "valid", script: `[{"text":"hi","usage":{"input_tokens":3}},{"tool_calls":[{"name":"a"}]}]`, mock: `[{"output":{"x":1}},{"error":"down","retryable":false}]`},
		{name: "empty mock", script: `[]`, mock: ``},
		{name: "unknown key", script: `[{"text":"hi"},{"txt":"x"}]`, wantErr: "models.m.script[1].txt: unknown key"},
		{name: "wrong type", script: `[{"text":3}]`, wantErr: "models.m.script[0].text: expected string, got number"},
		{name: "two kinds", script: `[{"text":"a","refuse":"b"}]`, wantErr: "models.m.script[0]: invalid scripted turn"},
		{name: "not a list", script: `{"text":"a"}`, wantErr: "models.m.script: expected array, got object"},
		{name: "bad JSON", script: `[{"text":}]`, wantErr: "models.m.script: not valid JSON"},
		{name: "bad mock", script: `[]`, mock: `[{"output":1,"error":"x"}]`, wantErr: "tools.t.mock[0]: a mock result has either output or error"},
		{name: "mock unknown key", script: `[]`, mock: `[{"outptu":1}]`, wantErr: "tools.t.mock[0].outptu: unknown key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := eval.ScriptedModel("models.m.script", json.RawMessage(tt.script), nil)
			if err == nil {
				_, err = eval.MockedTool("tools.t.mock", tool.Spec{Name: "t"}, json.RawMessage(tt.mock), nil)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
