package openai_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider"
	"github.com/reins-run/reins/provider/openai"
)

// ExampleNew points the client at a server speaking the Chat Completions protocol (here a local
// stand-in; in use, OpenAI's API when BaseURL is empty, or vLLM, Ollama, llama.cpp server).
func ExampleNew() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"gpt-4.1-mini",
			"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"Paris."}}],
			"usage":{"prompt_tokens":20,"completion_tokens":3,"total_tokens":23}}`)
	}))
	defer srv.Close()

	m, err := openai.New(provider.Config{
		Model:   "gpt-4.1-mini",
		BaseURL: srv.URL + "/v1",
		Prices:  provider.Prices{"gpt-4.1-mini": {InputPerMTok: 0.40, OutputPerMTok: 1.60}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, err := m.Generate(context.Background(), &model.Request{
		Instructions: "Answer in one word.",
		Messages:     []model.Message{{Role: model.RoleUser, Content: "What is the capital of France?"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Proposal.Kind, resp.Proposal.Text)
	fmt.Printf("%d in, %d out, $%.7f\n", resp.Usage.InputTokens, resp.Usage.OutputTokens, resp.CostUSD)
	// Output:
	// answer Paris.
	// 20 in, 3 out, $0.0000128
}
