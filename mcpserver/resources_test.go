package mcpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestProgress: a call with a progress token gets a progress notification per iteration of
// its run, naming the step, the iteration, its tool calls and tokens.
func TestProgress(t *testing.T) {
	s := newStack(t)
	notes := make(chan *mcp.ProgressNotificationParams, 8)
	cs := s.connect("sam", &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		notes <- r.Params
	}})
	params := &mcp.CallToolParams{Name: "think", Arguments: map[string]any{}}
	params.SetProgressToken("p-1")
	res, err := cs.CallTool(s.Ctx, params)
	if err != nil || res.IsError {
		t.Fatalf("think: %v %+v", err, res)
	}
	// The client hands notifications to its handler apart from the call's answer: they may
	// come after it.
	var got []*mcp.ProgressNotificationParams
	for len(got) < 2 {
		select {
		case p := <-notes:
			got = append(got, p)
		case <-s.Ctx.Done():
			t.Fatalf("progress notifications %d, want one per iteration (2)", len(got))
		}
	}
	select {
	case p := <-notes:
		t.Errorf("a third progress notification: %+v", p)
	default:
	}
	for i, p := range got {
		want := []string{"step act", "iteration ", "tool calls", "tokens"}
		for _, w := range want {
			if !strings.Contains(p.Message, w) {
				t.Errorf("notification %d %q does not say %q", i, p.Message, w)
			}
		}
		if p.ProgressToken != "p-1" || p.Progress != float64(i+1) {
			t.Errorf("notification %d: token %v progress %v", i, p.ProgressToken, p.Progress)
		}
	}
	if !strings.Contains(got[0].Message, "1 tool calls") {
		t.Errorf("the first iteration called the tool: %q", got[0].Message)
	}
}

// TestResources: a run and its iterations are readable as resources by a principal that may
// read runs; an unknown run is a JSON-RPC error.
func TestResources(t *testing.T) {
	s := newStack(t)
	cs := s.connect("sam", nil)
	res, err := cs.CallTool(s.Ctx, &mcp.CallToolParams{Name: "think", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Meta["reins/run_id"].(string)

	list, err := cs.ListResources(s.Ctx, nil)
	if err != nil || len(list.Resources) != 1 || list.Resources[0].URI != "reins://runs/"+id {
		t.Fatalf("resources/list: %v %+v", err, list)
	}
	tmpl, err := cs.ListResourceTemplates(s.Ctx, nil)
	if err != nil || len(tmpl.ResourceTemplates) != 2 {
		t.Fatalf("resources/templates/list: %v %+v", err, tmpl)
	}

	viewer := s.connect("vera", nil)
	run, err := viewer.ReadResource(s.Ctx, &mcp.ReadResourceParams{URI: "reins://runs/" + id})
	if err != nil {
		t.Fatal(err)
	}
	var result struct {
		RunID  string `json:"run_id"`
		Status string `json:"status"`
		Output any    `json:"output"`
	}
	if err := json.Unmarshal([]byte(run.Contents[0].Text), &result); err != nil || result.RunID != id || result.Status != "completed" {
		t.Errorf("the run's resource: %v %s", err, run.Contents[0].Text)
	}
	it, err := viewer.ReadResource(s.Ctx, &mcp.ReadResourceParams{URI: "reins://runs/" + id + "/iterations/act/1"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(it.Contents[0].Text, "lookup") {
		t.Errorf("iteration 1 of act does not show its tool call: %s", it.Contents[0].Text)
	}

	for uri, want := range map[string]string{
		"reins://runs/nothing":                     "there is no run nothing",
		"reins://runs/" + id + "/iterations/act/9": "has no iteration 9 of step act",
		"reins://runs/" + id + "/iterations/act/0": "not a whole number from 1",
		"file:///etc/passwd":                       "does not begin with reins://runs/",
	} {
		_, err := viewer.ReadResource(s.Ctx, &mcp.ReadResourceParams{URI: uri})
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) || !strings.Contains(rpc.Message, want) {
			t.Errorf("%s: %v, want an error saying %q", uri, err, want)
		}
	}
}
