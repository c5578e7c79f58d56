package trigger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/workflow"
)

// Config configures a Service.
type Config struct {
	// Conn is the NATS connection (required): the engine's process's own, which may start
	// runs as any principal and write the triggers bucket.
	Conn *conn.Conn
	// Clock is the clock of schedules; nil means the real clock.
	Clock clock.Clock
	// Log receives what triggers did and what went wrong; nil discards.
	Log *slog.Logger
	// MaxInputBytes bounds a run input a trigger starts a run with; 0 means 64 MiB.
	MaxInputBytes int64
	// Subjects are the subject patterns the operator allows subject triggers to listen on
	// (operator.Config.TriggerSubjects), captured by the stream of subject triggers; none:
	// subject triggers start nothing (the submission check refuses them).
	Subjects []string
}

// Service starts the runs of the triggers of the registered workflows: Run follows the registry
// and decides schedules on their due times (Tick) and consumes subject triggers' messages;
// Deliver starts the runs of a webhook delivery. It is safe for concurrent use, and several
// Services (engines) may run on one NATS server at once.
type Service struct {
	cfg   Config
	names natsbox.Names
	js    jetstream.JetStream
	// admin reads the registry and runs' records, and starts the triggers' runs as the
	// principals that registered their workflows (client.StartOptions.As).
	admin *client.Client

	mu     sync.Mutex
	active map[string]*active // by workflow name: the latest version's
	synced bool
	kv     jetstream.KeyValue
	subs   subjects
}

// active is a registered workflow with triggers: its latest version.
type active struct {
	reg client.Registered
	bs  *workflow.Bundles
	def *workflow.Definition
	// schedules are its schedule triggers, parsed.
	schedules map[string]*workflow.Schedule
}

// New returns the Service of cfg. It does no I/O until used.
func New(cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxInputBytes <= 0 {
		cfg.MaxInputBytes = wire.DefaultMaxValue
	}
	s := &Service{cfg: cfg, names: (*natsbox.Box)(cfg.Conn).Names(), js: (*natsbox.Box)(cfg.Conn).JetStream(), active: map[string]*active{}}
	s.subs.running = map[string]*consumption{}
	// The start event's time is the real clock's, whatever the schedules' clock: the engine
	// measures a run's deadline from it.
	s.admin = client.New(client.Config{Conn: cfg.Conn, Principal: natsbox.RoleAdmin, MaxInputBytes: cfg.MaxInputBytes})
	return s
}

// Sync reads the latest version of every registered workflow and makes their triggers the
// active ones. A version that cannot be read keeps the triggers of the one read before.
func (s *Service) Sync(ctx context.Context) error {
	regs, err := s.admin.Workflows(ctx)
	if err != nil {
		return err
	}
	next := map[string]*active{}
	s.mu.Lock()
	prev := s.active
	s.mu.Unlock()
	for _, reg := range regs {
		if a := prev[reg.Name]; a != nil && a.reg.Hash == reg.Hash {
			next[reg.Name] = a
			continue
		}
		a, err := s.load(ctx, reg)
		if err != nil {
			s.cfg.Log.Error("trigger: cannot read a registered workflow; its triggers are those of the version read before", "workflow", reg.Name, "version", reg.Version, "err", err)
			if old := prev[reg.Name]; old != nil {
				next[reg.Name] = old
			}
			continue
		}
		if a != nil {
			next[reg.Name] = a
		}
	}
	s.mu.Lock()
	s.active, s.synced = next, true
	s.mu.Unlock()
	return nil
}

// load reads version reg; nil when it has no triggers.
func (s *Service) load(ctx context.Context, reg client.Registered) (*active, error) {
	bs, err := s.admin.Bundles(ctx, reg)
	if err != nil {
		return nil, err
	}
	def := bs.All[bs.Root].Definition
	if len(def.Triggers) == 0 {
		return nil, nil
	}
	a := &active{reg: reg, bs: bs, def: def, schedules: map[string]*workflow.Schedule{}}
	for _, t := range def.Triggers {
		if t.Schedule == "" {
			continue
		}
		sch, err := workflow.ParseSchedule(t.Schedule, t.Timezone)
		if err != nil {
			return nil, fmt.Errorf("trigger %s: %w", t.Name, err)
		}
		a.schedules[t.Name] = sch
	}
	return a, nil
}

// snapshot returns the active workflows, by name order.
func (s *Service) snapshot() []*active {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*active, 0, len(s.active))
	for _, a := range s.active {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b *active) int { return cmpString(a.reg.Name, b.reg.Name) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Started is a run a trigger started, or had started before (Existing: the same due time,
// message or delivery again).
type Started struct {
	RunID    string `json:"run_id"`
	Workflow string `json:"workflow"`
	Version  int    `json:"version"`
	Trigger  string `json:"trigger"`
	Existing bool   `json:"existing,omitempty"`
}

// start starts the run id of a with input, as the principal that registered a: on the engine's
// subject of the run (client.StartOptions.As), the only one the engine takes the start of a trigger's
// run id ("t-…", the server's space) on, so that no person can take the id first.
func (s *Service) start(ctx context.Context, a *active, trig, id string, input json.RawMessage) (Started, error) {
	st := Started{RunID: id, Workflow: a.reg.Name, Version: a.reg.Version, Trigger: trig}
	_, err := s.admin.StartWith(ctx, a.bs, input, client.StartOptions{RunID: id, Registered: &a.reg, Trigger: true, As: a.reg.RegisteredBy})
	switch {
	case errors.Is(err, client.ErrExists):
		// Existing only when the run is this trigger's: one a client took the id of first
		// (before client ids were kept out of triggers' space) is not answered as if it were.
		if err := s.own(ctx, a, id); err != nil {
			return st, fmt.Errorf("trigger: workflow %s trigger %s: start run %s: %w", a.reg.Name, trig, id, err)
		}
		st.Existing = true
		return st, nil
	case err != nil:
		return st, fmt.Errorf("trigger: workflow %s trigger %s: start run %s: %w", a.reg.Name, trig, id, err)
	}
	s.cfg.Log.Info("trigger started a run", "workflow", a.reg.Name, "version", a.reg.Version, "trigger", trig, "run_id", id, "as", a.reg.RegisteredBy)
	return st, nil
}

// ErrTaken: the id of the run a trigger starts names a run the trigger did not start.
var ErrTaken = errors.New("the run id is taken by a run the trigger did not start")

// own checks that run id, which exists, was started by a trigger of a's name: its start names
// a version of the name (client.Origin believes only a start whose definition is that
// version's), and came from that version's registrant or the server itself; or, a run started
// before starts named versions, it runs a's definition as a's registrant. ErrTaken otherwise.
func (s *Service) own(ctx context.Context, a *active, id string) error {
	o, err := s.admin.Origin(ctx, id)
	if err != nil {
		return err
	}
	if o.Registered == nil {
		if o.By == a.reg.RegisteredBy && o.Hash == a.reg.Hash {
			return nil
		}
		return ErrTaken
	}
	if o.Registered.Name != a.reg.Name {
		return ErrTaken
	}
	v, err := s.admin.Workflow(ctx, o.Registered.Name, o.Registered.Version)
	if err != nil {
		return err
	}
	if o.By != "" && o.By != v.RegisteredBy {
		return ErrTaken
	}
	return nil
}

// ErrNoHook: no registered workflow has a webhook trigger of that name.
var ErrNoHook = errors.New("no registered workflow listens on this webhook")

// Deliver starts a run of every registered workflow with a webhook trigger named hook, with
// body (a JSON object, checked by the caller along with the signature) as its input. delivery
// is the sender's id of the delivery ("" for none): the same delivery again starts nothing new
// (Existing), whenever it comes; without one, every call starts new runs.
func (s *Service) Deliver(ctx context.Context, hook string, body json.RawMessage, delivery string) ([]Started, error) {
	s.mu.Lock()
	synced := s.synced
	s.mu.Unlock()
	if !synced {
		if err := s.Sync(ctx); err != nil {
			return nil, err
		}
	}
	key := delivery
	if key == "" {
		key = client.NewRunID() // a fresh key: a new run each time
	}
	var out []Started
	for _, a := range s.snapshot() {
		for _, t := range a.def.Triggers {
			if t.Webhook != hook {
				continue
			}
			st, err := s.start(ctx, a, t.Name, RunID("webhook", a.reg.Name, t.Name, key), body)
			if err != nil {
				return out, err
			}
			out = append(out, st)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("trigger: webhook %s: %w", hook, ErrNoHook)
	}
	return out, nil
}

// bucket opens the triggers bucket, creating the layout when it does not exist yet.
func (s *Service) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv != nil {
		return s.kv, nil
	}
	var kv jetstream.KeyValue
	open := func(ctx context.Context) (err error) {
		kv, err = s.js.KeyValue(ctx, s.names.TriggersBucket())
		return err
	}
	err := natsbox.Retry(ctx, open)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		if err = natsbox.EnsureLayout(ctx, s.js, (*natsbox.Box)(s.cfg.Conn).Layout()); err == nil {
			err = natsbox.Retry(ctx, open)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("trigger: open the triggers bucket: %w", err)
	}
	s.kv = kv
	return kv, nil
}
