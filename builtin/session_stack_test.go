package builtin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/host"
	"github.com/reins-run/reins/internal/natsbox"
	_ "github.com/reins-run/reins/internal/natsbox/embed"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/session"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// replier is the model "main" of the tests' workflows: it records what each call is sent and
// answers "re: " and the last user message. With gate set, every call first waits on it.
type replier struct {
	mu   sync.Mutex
	reqs [][]model.Message
	gate func(ctx context.Context) error
}

func (m *replier) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, slices.Clone(req.Messages))
	m.mu.Unlock()
	if m.gate != nil {
		if err := m.gate(ctx); err != nil {
			return nil, err
		}
	}
	last := ""
	for _, msg := range req.Messages {
		if msg.Role == model.RoleUser {
			last = msg.Content
		}
	}
	in := model.EstimateInputTokens(req)             // so that the loop's count is its estimate
	if strings.HasPrefix(last, "The agent's goal") { // a summarizer's call (strategy summarize)
		return &model.Response{Proposal: model.Proposal{Kind: model.KindAnswer, Text: "The customer complained about late parcels."}, Usage: model.Usage{InputTokens: in, OutputTokens: 5}}, nil
	}
	return &model.Response{Proposal: model.Proposal{Kind: model.KindAnswer, Text: "re: " + last}, Usage: model.Usage{InputTokens: in, OutputTokens: 5}}, nil
}

// requests returns the messages of every call so far.
func (m *replier) requests() [][]model.Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.reqs)
}

// stack is an embedded NATS server with the engine and the built-in workers, whose model
// "main" is rec and whose clock (the workers': sessions' saves and expiry) is clk.
type stack struct {
	t     *testing.T
	ctx   context.Context
	box   *natsbox.Box
	rec   *replier
	clk   *clock.Virtual
	store *session.Store
}

func newStack(t *testing.T) *stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	log := runtest.Logger(t)
	box, err := natsbox.Open(ctx, natsbox.Options{DataDir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = box.Close() })
	s := &stack{t: t, ctx: ctx, box: box, rec: &replier{}, clk: clock.NewVirtual(time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC))}
	h, err := host.Start(ctx, host.Config{Conn: (*conn.Conn)(box), Engine: true, Logger: log,
		Register: func(w *worker.Worker) error {
			return builtin.Register(w, builtin.Config{Models: map[string]model.Model{"main": s.rec}, Clock: s.clk})
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	if s.store, err = session.Open(ctx, (*conn.Conn)(box)); err != nil {
		t.Fatal(err)
	}
	return s
}

// supportFlow is the workflow of the tests: one agent step "reply" of model "main" whose
// session is the input's customer; name and extra (more keys of the step) vary.
func supportFlow(t *testing.T, name, extra string) *workflow.Definition {
	t.Helper()
	src := fmt.Sprintf(`name = %q
[models.main]
provider = "go"
[[steps]]
id = "reply"
type = "agent"
model = "main"
input = "{{input.customer}}"
goal = "{{input.q}}"
session = "{{input.customer}}"
%s
`, name, extra)
	def, ps := workflow.Parse("support.toml", []byte(src))
	if len(ps) == 0 {
		ps = workflow.Validate(def, workflow.Options{})
	}
	if len(ps) > 0 {
		t.Fatalf("the test's workflow: %v", ps)
	}
	def.Normalize()
	return def
}

// run runs def as principal with the input {"customer", "q"} and returns its record once it
// finished; the run must complete.
func (s *stack) run(def *workflow.Definition, principal, customer, q string) *client.Record {
	s.t.Helper()
	id := s.start(def, principal, customer, q)
	return s.wait(principal, id)
}

func (s *stack) start(def *workflow.Definition, principal, customer, q string) string {
	s.t.Helper()
	bs, err := workflow.NewBundles(def, "")
	if err != nil {
		s.t.Fatal(err)
	}
	in, _ := json.Marshal(map[string]string{"customer": customer, "q": q})
	id, err := s.client(principal).Start(s.ctx, bs, in, "")
	if err != nil {
		s.t.Fatalf("start: %v", err)
	}
	return id
}

func (s *stack) wait(principal, id string) *client.Record {
	s.t.Helper()
	rec, err := s.client(principal).Wait(s.ctx, id)
	if err != nil {
		s.t.Fatalf("wait for run %s: %v", id, err)
	}
	if rec.Run.Status != protocol.RunCompleted {
		s.t.Fatalf("run %s ended %s: %+v", id, rec.Run.Status, rec.Run.Error)
	}
	return rec
}

// client acts as principal (the engine takes the run's StartedBy from its subject).
func (s *stack) client(principal string) *client.Client {
	return client.New(client.Config{Conn: (*conn.Conn)(s.box), Principal: principal})
}

// session reads the session of def's step for principal and customer.
func (s *stack) session(def *workflow.Definition, principal, customer string) *session.Session {
	s.t.Helper()
	sess, err := s.store.Get(s.ctx, session.Scope{Principal: principal, Workflow: def.Name, Step: "reply", Session: customer}.Key())
	if err != nil {
		s.t.Fatalf("session of %s for %s: %v", customer, principal, err)
	}
	return sess
}

// texts are the contents of msgs.
func texts(msgs []model.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Content
	}
	return out
}
