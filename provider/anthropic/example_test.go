package anthropic_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider"
	"github.com/reins-run/reins/provider/anthropic"
)

func ExampleNew() {
	// A local server standing in for the Messages API.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5",
			"content":[{"type":"tool_use","id":"toolu_1","name":"read_order","input":{"order_id": "O-104"}}],
			"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":412,"output_tokens":38}}`)
	}))
	defer srv.Close()

	m, err := anthropic.New(provider.Config{
		Model:   "claude-sonnet-4-5",
		BaseURL: srv.URL, // omit for api.anthropic.com, and set APIKey
	})
	if err != nil {
		panic(err)
	}
	resp, err := m.Generate(context.Background(), &model.Request{
		Instructions: "You check refunds.",
		Messages:     []model.Message{{Role: model.RoleUser, Content: "Is the refund for O-104 justified?"}},
		Tools:        []model.ToolDef{{Name: "read_order", Description: "Read an order by id."}},
	})
	if err != nil {
		panic(err)
	}
	for _, c := range resp.Proposal.Calls {
		fmt.Printf("%s: %s %s (%s)\n", resp.Proposal.Kind, c.Name, c.Arguments, c.ID)
	}
	fmt.Printf("tokens: %d in, %d out; cost $%.6f\n", resp.Usage.InputTokens, resp.Usage.OutputTokens, resp.CostUSD)
	// Output:
	// tool_calls: read_order {"order_id":"O-104"} (toolu_1)
	// tokens: 412 in, 38 out; cost $0.001806
}
