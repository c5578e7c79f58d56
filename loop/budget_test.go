package loop_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/internal/testkit/buildtest"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
)

// pricedModel plays a provider that honours the reply cap: each call's input is the loop's
// estimate plus up to maxErr tokens (the estimate's error), its output a random number of tokens
// up to the cap (or 2,000 with none), and its cost what its price table says. It proposes a
// tool call until its turns run out, then answers.
type pricedModel struct {
	rng       *rand.Rand
	maxErr    int64
	in, out   float64 // USD per token
	turns     int
	calls     int
	caps      []int64
	maxErrHit int64
}

func (m *pricedModel) Generate(_ context.Context, req *model.Request) (*model.Response, error) {
	m.calls++
	m.caps = append(m.caps, req.MaxOutputTokens)
	extra := m.rng.Int64N(m.maxErr + 1)
	in := model.EstimateInputTokens(req) + extra
	limit := int64(2000)
	if req.MaxOutputTokens > 0 {
		limit = req.MaxOutputTokens
	}
	out := m.rng.Int64N(limit) + 1
	u := model.Usage{InputTokens: in, OutputTokens: out}
	p := model.Proposal{Kind: model.KindAnswer, Text: "done"}
	if m.calls <= m.turns {
		p = model.Proposal{Kind: model.KindToolCalls, Calls: []model.ToolCall{{Name: "read", Arguments: json.RawMessage(`{"q":"` + string(rune('a'+m.calls%26)) + `"}`)}}}
	}
	return &model.Response{Proposal: p, Usage: u, CostUSD: float64(in)*m.in + float64(out)*m.out}, nil
}

func (m *pricedModel) TokenPrices() (float64, float64, bool) { return m.in, m.out, true }

// trajectory runs one random bounded loop and returns how far past its budgets it went.
func trajectory(t testing.TB, rng *rand.Rand) (tokenOver int64, costOver float64, m *pricedModel, b loop.Budget) {
	m = &pricedModel{rng: rng, maxErr: rng.Int64N(50), in: float64(rng.IntN(20)) / 1e6, out: float64(1+rng.IntN(80)) / 1e6, turns: rng.IntN(12)}
	b = loop.Budget{MaxIterations: 20, MaxToolCalls: 50, MaxRepeatedCalls: 50}
	if rng.IntN(4) != 0 {
		b.MaxTokens = 50 + rng.Int64N(5000)
	}
	if rng.IntN(3) != 0 {
		b.MaxCostUSD = float64(1+rng.IntN(1000)) / 1e5
	}
	clk := clock.NewVirtual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	read, err := tool.NewMock(tool.Spec{Name: "read", InputSchema: json.RawMessage(`{"type":"object"}`)},
		[]tool.MockResult{{Output: json.RawMessage(`{"ok":true}`)}}, clk)
	if err != nil {
		t.Fatal(err)
	}
	c, err := loop.New(loop.Config{Model: m, Tools: []tool.Tool{read}, Budget: b, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	res := c.Run(context.Background(), "r", "Find it.")
	if b.MaxTokens > 0 {
		tokenOver = res.State.Usage.Total() - b.MaxTokens
	}
	if b.MaxCostUSD > 0 {
		costOver = res.State.CostUSD - b.MaxCostUSD
	}
	return tokenOver, costOver, m, b
}

// TestHardBudgets runs 10,000 random trajectories (budgets, prices, estimate errors, replies), and
// 100,000 under the build tag e2e without -race or -short:
// no run spends more tokens than its budget plus the error of its last input estimate, nor more
// than its cost budget plus that error at the input price (docs/loop.md). FuzzHardBudgets goes
// on from random seeds.
func TestHardBudgets(t *testing.T) {
	n := 10_000
	if buildtest.Heavy && !testing.Short() && !raceEnabled { // the race detector makes each ten times slower
		n = 100_000
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var worstTokens int64
	var worstCost float64
	for i := range n {
		tokens, cost, m, b := trajectory(t, rng)
		if tokens > m.maxErr {
			t.Fatalf("trajectory %d (budget %+v): %d tokens over the budget, more than the estimate's error %d", i, b, tokens, m.maxErr)
		}
		if cost > float64(m.maxErr)*m.in+1e-12 {
			t.Fatalf("trajectory %d (budget %+v): $%g over the cost budget, more than the estimate's error at the input price", i, b, cost)
		}
		worstTokens, worstCost = max(worstTokens, tokens), max(worstCost, cost)
	}
	t.Logf("%d trajectories: at most %d tokens and $%.8f over a budget", n, worstTokens, worstCost)
}

func FuzzHardBudgets(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		tokens, cost, m, bud := trajectory(t, rand.New(rand.NewPCG(a, b)))
		if tokens > m.maxErr || cost > float64(m.maxErr)*m.in+1e-12 {
			t.Fatalf("budget %+v: %d tokens, $%g over; estimate error up to %d", bud, tokens, cost, m.maxErr)
		}
	})
}

// A call whose estimated input alone would pass the token budget is not made.
func TestCallNotMadeOverBudget(t *testing.T) {
	long := make([]byte, 4000)
	for i := range long {
		long[i] = 'x'
	}
	m := &pricedModel{rng: rand.New(rand.NewPCG(1, 1)), out: 1e-6}
	c, err := loop.New(loop.Config{Model: m, Budget: loop.Budget{MaxTokens: 500}})
	if err != nil {
		t.Fatal(err)
	}
	res := c.Run(context.Background(), "r", string(long)) // about 1,000 tokens of goal
	if res.StopReason != loop.MaxTokens || m.calls != 0 {
		t.Fatalf("stop %s after %d calls; want max_tokens before any call", res.StopReason, m.calls)
	}
	if want := "0 tokens used, budget 500: the next model call's input alone (about 1005 tokens) would pass it"; res.Detail != want {
		t.Errorf("detail %q, want it to say %q", res.Detail, want)
	}
}
