package builtin_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/promtest"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/metrics"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/ratelimit"
)

// TestOperatorLimitsShared: on a server, an llm step's call of the operator's model waits while
// another worker holds the model's only slot (max_concurrent = 1), reaches the provider only
// once the slot is freed, and the wait is in reins_model_wait_seconds. The limits are the
// operator's: the workflow names none.
func TestOperatorLimitsShared(t *testing.T) {
	env := runtest.New(t)
	if err := natsbox.EnsureLayout(env.Ctx, env.Box.JetStream(), env.Box.Layout()); err != nil {
		t.Fatal(err)
	}
	newLimiter := func() *ratelimit.Limiter {
		l, err := ratelimit.New(ratelimit.Config{JS: env.Box.JetStream(), Bucket: env.Box.Names().LimitsBucket()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.Close)
		return l
	}
	ops := newChatServer(t, completion("ok", 10, 1))
	op := fakeOperator{
		providers: map[string]operator.Provider{"corp": {Kind: "openai", BaseURL: ops.URL + "/v1",
			ModelLimits: map[string]operator.RateLimits{"gpt-test": {MaxConcurrent: 1}}}},
		keys: map[string]string{"corp": "sk-operator"},
	}
	m := metrics.New()
	h := newHandlers(t, builtin.Config{Operator: op, Limiter: newLimiter(), Metrics: m})
	key := ratelimit.ModelKey("corp", "gpt-test")

	// Another worker's call holds the slot.
	other, err := newLimiter().Acquire(env.Ctx, ratelimit.Scope{Key: key, Limits: ratelimit.Limits{MaxConcurrent: 1}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := env.Box.JetStream().KeyValue(env.Ctx, env.Box.Names().LimitsBucket())
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(env.Ctx, key, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()

	b, hash := bundleOf(t, "name = \"t\"\n[models.m]\nprovider = \"corp\"\nmodel = \"gpt-test\"\n[[steps]]\nid = \"ask\"\ntype = \"llm\"\nmodel = \"m\"\nprompt = \"hi\"\n", "")
	ft := newTask(b, hash, "ask", 1, "null")
	done := make(chan error, 1)
	go func() { done <- h.LLM(ft) }()
	for e := range w.Updates() { // the step's call takes its place in the queue
		if e == nil {
			continue
		}
		if st, err := ratelimit.DecodeState(e.Value()); err == nil && len(st.Queue) == 1 {
			break
		}
	}
	ops.mu.Lock()
	seen := len(ops.requests)
	ops.mu.Unlock()
	if seen != 0 {
		t.Fatalf("the provider got %d requests while the slot was held", seen)
	}
	if err := other.Release(1); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ops.mu.Lock()
	seen = len(ops.requests)
	ops.mu.Unlock()
	if ft.answer != "complete" || seen != 1 {
		t.Fatalf("answer %s (%v), %d requests; want complete after one request", ft.answer, ft.err, seen)
	}
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	if n, ok := promtest.Value(byName, "reins_model_wait_seconds", "model", "gpt-test", "provider", "corp"); !ok || n != 1 {
		t.Errorf("reins_model_wait_seconds counts %v calls (present %t), want 1", n, ok)
	}
}
