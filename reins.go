// Package reins is the one package a Go program imports to run bounded, durable agent workflows:
// one New, a few verbs, and nothing else to wire.
//
//	r, err := reins.New(ctx, reins.Config{})           // an embedded NATS server, the engine, workers
//	defer r.Close()
//	r.Model("claude", myModel)                          // Go models (model.Model) for llm and agent steps
//	r.Tool("orders.read", readOrder)                    // Go tools for agent steps
//	r.Handle("review", review)                          // Go handlers for task and agent_loop steps
//	res, err := r.Run(ctx, def, map[string]any{"order_id": "O-1"})
//
// New starts or connects to NATS: an embedded server whose JetStream files live in
// [Config.DataDir] (a temporary directory when empty), or the server at [Config.NATSURL]. The
// engine starts at once; the worker that serves the registered tools, handlers and the built-in
// llm and agent steps starts with the first Start, Run, Approve or Signal (or StartWorkers, for
// a program that restarts with runs in flight), so register everything before that (a
// registration after it panics, as http.ServeMux does on a duplicate).
//
// Every other verb is a thin call to the packages that do the work: client (the client of
// runs), runner (the engine's shell, through host), worker (handlers), builtin (the llm and
// agent steps), workflow (definitions); the types that cross processes are protocol's.
// It owns the lifecycle of what New started and nothing else: it must not decide anything about
// runs (package engine does).
package reins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/host"
	"github.com/reins-run/reins/internal/auth"
	"github.com/reins-run/reins/internal/natsbox"
	_ "github.com/reins-run/reins/internal/natsbox/embed" // Open starts embedded servers
	"github.com/reins-run/reins/metrics"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/provider/registry"
	"github.com/reins-run/reins/tool"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// The types that this package's API takes and returns, so that a program needs no other package for them.
type (
	// Definition is a workflow: built with [workflow.New] or read with [ParseWorkflow].
	Definition = workflow.Definition
	// Handler serves the tasks of a task or agent_loop step (Handle).
	Handler = worker.Handler
	// TaskContext is what a handler gets: the task, its checkpoint, and the ways to answer.
	TaskContext = worker.TaskContext
	// Usage is what a task spent (TaskContext.AddUsage).
	Usage = protocol.Usage
	// Result is a finished run as the workflow file contract gives it.
	Result = protocol.Result
	// Record is a run's saved state (Get, List).
	Record = client.Record
	// Event is one thing that moved a run (Watch): its Type says which, and its fields what.
	Event = protocol.Event
	// RunStatus is the status of a run (List filters by it).
	RunStatus = protocol.RunStatus
)

// StepResult is one step of a Result.
type StepResult = protocol.StepResult

// StepStatus is the status of a step of a Result.
type StepStatus = protocol.StepStatus

// The statuses of a step.
const (
	StepPending   = protocol.StepPending
	StepRunning   = protocol.StepRunning
	StepCompleted = protocol.StepCompleted
	StepFailed    = protocol.StepFailed
	StepSkipped   = protocol.StepSkipped
	StepCancelled = protocol.StepCancelled
	StepWaiting   = protocol.StepWaiting
)

// Query selects runs for Query: by status, by workflow, a page at a time.
type Query = client.Query

// Page is one page of a Query's runs, with the Query.After of the next.
type Page = client.Page

// The statuses of a run.
const (
	RunQueued    = protocol.RunQueued
	RunRunning   = protocol.RunRunning
	RunWaiting   = protocol.RunWaiting
	RunCompleted = protocol.RunCompleted
	RunFailed    = protocol.RunFailed
	RunCancelled = protocol.RunCancelled
	RunTimedOut  = protocol.RunTimedOut
)

// The types of the events Watch yields.
const (
	EvStart         = protocol.EvStart
	EvCompleted     = protocol.EvCompleted
	EvContinued     = protocol.EvContinued
	EvFailed        = protocol.EvFailed
	EvTimedOut      = protocol.EvTimedOut
	EvTick          = protocol.EvTick
	EvCancel        = protocol.EvCancel
	EvChildFinished = protocol.EvChildFinished
	EvWaiting       = protocol.EvWaiting
	EvDecision      = protocol.EvDecision
	EvResume        = protocol.EvResume
	EvSignal        = protocol.EvSignal
	EvGranted       = protocol.EvGranted
)

// The errors of Get, Start and the other calls on runs, for [errors.Is].
var (
	ErrNotFound = client.ErrNotFound // no run of that id
	ErrExists   = client.ErrExists   // a run of that id exists already
)

// ParseWorkflow reads and validates a workflow file's contents (file names it in errors), as
// reins validate does; the error lists every problem, one per line.
func ParseWorkflow(file string, data []byte) (*Definition, error) {
	def, ps := workflow.Parse(file, data)
	if len(ps) == 0 {
		ps = workflow.Validate(def, workflow.Options{})
	}
	if len(ps) > 0 {
		return nil, ps
	}
	def.Normalize()
	return def, nil
}

// NewWorkflow begins a workflow built in Go: add its steps and edges to the builder, then
// Build it (see [workflow.Builder]). A workflow file is read with [ParseWorkflow] instead.
func NewWorkflow(name string) *workflow.Builder { return workflow.New(name) }

// Config configures a Reins. The zero value runs everything in this process on an embedded
// server in a temporary directory.
type Config struct {
	// DataDir is where the embedded server keeps its JetStream files; runs survive a restart
	// of the program on the same directory. "" means a new temporary directory, removed by
	// Close.
	DataDir string
	// NATSURL connects to an external NATS server (a cluster) instead of starting one; Token
	// authenticates to it.
	NATSURL string
	Token   string
	// Replicas is how many copies of every stream and bucket to keep on an external cluster:
	// 0 keeps what exists (1 when new); more raises what has fewer and never lowers what has
	// more (docs/deploy.md).
	Replicas int
	// Namespace prefixes every subject, stream and bucket (docs/deploy.md, Namespaces), so
	// that deployments sharing a NATS server do not see each other's runs: "" is the default
	// namespace. Letters a-z, digits, '-' and '_', at most 32.
	Namespace string
	// JSDomain (a JetStream domain: a leaf node's client reaching its hub's JetStream) or
	// JSAPIPrefix (the prefix under which the account imports another account's JetStream
	// API) says where the JetStream of NATSURL is (docs/deploy.md, JetStream domains and API
	// prefixes). Exclusive, and for NATSURL only.
	JSDomain, JSAPIPrefix string
	// Model, when set (PROVIDER:NAME, such as "openai:gpt-4o-mini"), replaces the model of
	// every llm and agent step; the provider's key comes from its environment variable, or
	// from Registry with its base URL.
	Model    string
	Registry registry.Options
	// Listen, with an embedded server, also accepts TCP clients at this loopback address
	// (127.0.0.1:PORT, 127.0.0.1:0 for a free port; ClientURL says which): workers of other
	// processes and other reins commands on DataDir. They authenticate with the data
	// directory's admin token (DATA/admin.token, made on first use), as with reins run --listen,
	// or with the token of one of Principals.
	Listen string
	// Principals, with Listen, let other processes in as the operator's principals, as reins
	// serve does with the [principals] of its configuration (docs/reference/server.md): a
	// token identifies a name with roles ([operator.RoleWorker] serves tasks,
	// [operator.RoleSubmitter] starts runs, [operator.RoleApprover] decides approvals,
	// [operator.RoleViewer] reads runs), the server lets each do what its roles allow, and the
	// engine records who started and who decided (a [Record]'s Run.StartedBy and Run.Acts).
	// Each names its token by TokenEnv or TokenSHA256, never in the clear. None: the data
	// directory's admin alone. Not with NATSURL: an external server authenticates its own users.
	Principals []operator.Principal
	// SaveWindow is how long the engine may hold the saves of a fast loop's decisions to make
	// one (0: 100 ms); a negative window (-1) saves after every decision, so that a watcher
	// of the records (the progress of reins run) sees every iteration.
	SaveWindow time.Duration
	// Logger receives what the engine and workers could not do, and the warnings of Start;
	// nil discards.
	Logger *slog.Logger
	// Metrics receives the engine's, the workers' and the built-in steps' metrics
	// ([metrics.New]; serve Metrics.Handler on /metrics); nil: none.
	Metrics *metrics.Metrics
}

// Reins runs workflows: an engine and a worker in this process, on NATS.
type Reins struct {
	cfg    Config
	box    *natsbox.Box
	tmp    string // the temporary data directory Close removes
	eng    *host.Host
	client *client.Client

	mu       sync.Mutex
	models   map[string]model.Model
	tools    map[string]tool.Tool
	handlers map[string]worker.Handler
	workers  *host.Host // started by the first Start
	closed   bool
}

// New opens NATS (embedded or at cfg.NATSURL) and starts the engine. Close stops them.
func New(ctx context.Context, cfg Config) (*Reins, error) {
	r := &Reins{cfg: cfg, models: map[string]model.Model{}, tools: map[string]tool.Tool{}, handlers: map[string]worker.Handler{}}
	opts := natsbox.Options{URL: cfg.NATSURL, Token: cfg.Token, DataDir: cfg.DataDir, Listen: cfg.Listen, Logger: cfg.Logger, Replicas: cfg.Replicas, Namespace: cfg.Namespace,
		JSDomain: cfg.JSDomain, JSAPIPrefix: cfg.JSAPIPrefix}
	if cfg.NATSURL == "" && cfg.DataDir == "" {
		dir, err := os.MkdirTemp("", "reins-")
		if err != nil {
			return nil, fmt.Errorf("reins: a data directory: %w", err)
		}
		r.tmp, opts.DataDir = dir, dir
	}
	roles, err := r.letIn(&opts)
	if err != nil {
		r.removeTmp()
		return nil, err
	}
	box, err := natsbox.Open(ctx, opts)
	if err != nil {
		r.removeTmp()
		return nil, fmt.Errorf("reins: %w", err)
	}
	r.box = box
	if r.eng, err = host.Start(context.WithoutCancel(ctx), host.Config{Conn: (*conn.Conn)(box), Engine: true, SaveWindow: cfg.SaveWindow, Roles: roles, Logger: cfg.Logger, Metrics: cfg.Metrics}); err != nil {
		r.Close()
		return nil, fmt.Errorf("reins: %w", err)
	}
	r.client = client.New(client.Config{Conn: (*conn.Conn)(box)})
	return r, nil
}

// letIn sets who the embedded server lets in through Config.Listen: the data directory's admin
// and Config.Principals. It returns the engine's roles of principals (nil: the admin's alone).
func (r *Reins) letIn(opts *natsbox.Options) (func(string) []string, error) {
	cfg := r.cfg
	switch {
	case len(cfg.Principals) > 0 && cfg.NATSURL != "":
		return nil, errors.New("reins: Config.Principals applies to the embedded server: an external server (NATSURL) authenticates its own users")
	case len(cfg.Principals) > 0 && cfg.Listen == "":
		return nil, errors.New("reins: Config.Principals lets other processes in through Config.Listen: set Listen too")
	case cfg.Listen == "" || cfg.NATSURL != "":
		return nil, nil
	}
	var op *operator.Config
	if len(cfg.Principals) > 0 {
		var err error
		if op, err = operator.WithPrincipals(cfg.Principals); err != nil {
			return nil, fmt.Errorf("reins: Config.%w", err)
		}
		for i, p := range cfg.Principals {
			if p.TokenEnv != "" && strings.TrimSpace(os.Getenv(p.TokenEnv)) == "" {
				return nil, fmt.Errorf("reins: Config.Principals[%d] (%s): TokenEnv: the environment variable %s is not set", i, p.Name, p.TokenEnv)
			}
		}
	}
	res, err := auth.Principals(opts.DataDir, op)
	if err != nil {
		return nil, fmt.Errorf("reins: %w", err)
	}
	opts.Authenticate = auth.Authenticator(res)
	if op == nil {
		return nil, nil
	}
	return auth.Roles(res), nil
}

// Tool registers a Go tool under name, for the agent steps whose workflow tools name it as
// their handler ([workflow.ToolDef.Handler]). It panics once the worker started (the first
// Start or Run), or on a name registered before.
func (r *Reins) Tool(name string, t tool.Tool) {
	r.register(name, func() {
		if r.tools[name] != nil {
			panic(fmt.Sprintf("reins: Tool(%q): a tool is already registered under this name", name))
		}
		r.tools[name] = t
	})
}

// Model registers a Go model under name: it serves every llm and agent step whose model has
// that name, whatever the workflow declares for it (declare it with provider = "go" when only
// the program provides it, or keep a scripted model there for tests). [Config.Model], when set,
// replaces every model, Go models included. It panics once the worker started, or on a name
// registered before.
func (r *Reins) Model(name string, m model.Model) {
	r.register(name, func() {
		if r.models[name] != nil {
			panic(fmt.Sprintf("reins: Model(%q): a model is already registered under this name", name))
		}
		r.models[name] = m
	})
}

// Handle registers a Go handler under name, for the task and agent_loop steps that name it as
// their handler. It panics once the worker started, or on a name registered before.
func (r *Reins) Handle(name string, h worker.Handler) {
	r.register(name, func() {
		if r.handlers[name] != nil {
			panic(fmt.Sprintf("reins: Handle(%q): a handler is already registered under this name", name))
		}
		r.handlers[name] = h
	})
}

func (r *Reins) register(name string, add func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.workers != nil {
		panic(fmt.Sprintf("reins: %q registered after the first run started: register every tool and handler first", name))
	}
	add()
}

// StartWorkers starts the worker of the registered tools, handlers and models and of the
// built-in llm and agent steps, once; registering after it panics. Start, Run, Approve and
// Signal call it. A program that opens a data directory with runs in flight (it restarted
// after a crash) calls it once it registered everything, so that their tasks are served.
func (r *Reins) StartWorkers(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return errors.New("reins: closed")
	case r.workers != nil:
		return nil
	}
	bc := builtin.Config{Tools: r.tools, Models: r.models, Model: r.cfg.Model, Registry: r.cfg.Registry, Logger: r.cfg.Logger, Metrics: r.cfg.Metrics}
	h, err := host.Start(context.WithoutCancel(ctx), host.Config{Conn: (*conn.Conn)(r.box), Handlers: r.handlers, Logger: r.cfg.Logger, Metrics: r.cfg.Metrics,
		Register: func(w *worker.Worker) error { return builtin.Register(w, bc) }})
	if err != nil {
		return fmt.Errorf("reins: start the worker: %w", err)
	}
	r.workers = h
	return nil
}

// Start starts a run of def with input (any JSON-encodable value; nil is null) and returns its
// id. Sub-workflows that def's call, parallel or map steps name are read from files relative
// to def's own file (ParseWorkflow's file name), or to the working directory for a definition
// built in Go, as reins run reads them. What the run needs that no worker serves (a handler, a
// tool, a model) is a warning on the Logger: the run waits for it, since a worker may start
// later.
func (r *Reins) Start(ctx context.Context, def *workflow.Definition, input any) (string, error) {
	return r.StartWith(ctx, def, input, StartOptions{})
}

// StartOptions are the options of StartWith.
type StartOptions struct {
	// RunID names the run (1 to 64 of A-Z a-z 0-9 _ -, and none of the ids the server gives:
	// not "t-…", not ending in -fork-N; "": a new id). A start with the id of a run that
	// exists fails with [ErrExists]: a program that starts "run X" again after a crash
	// starts it once.
	RunID string
}

// StartWith is Start with options.
func (r *Reins) StartWith(ctx context.Context, def *workflow.Definition, input any, o StartOptions) (string, error) {
	if err := r.StartWorkers(ctx); err != nil {
		return "", err
	}
	raw, err := json.Marshal(input)
	if err != nil {
		return "", fmt.Errorf("reins: the input cannot be encoded as JSON: %w", err)
	}
	bs, err := workflow.NewBundles(def, "")
	if err != nil {
		return "", fmt.Errorf("reins: %w", err)
	}
	if missing, err := r.client.Unserved(ctx, bs); err == nil && r.cfg.Logger != nil {
		for _, m := range missing {
			r.cfg.Logger.Warn(m) // the run waits for it: another process may serve it yet
		}
	}
	return r.client.Start(ctx, bs, raw, o.RunID)
}

// Client is the client of runs that the verbs use, for what they do not cover: replay, fork,
// prune, the records as the engine saves them (Client.Watch).
func (r *Reins) Client() *client.Client { return r.client }

// ClientURL is where other processes reach the embedded server that [Config.Listen] opened ("":
// it does not listen).
func (r *Reins) ClientURL() string { return r.box.ClientURL() }

// Run starts a run of def with input and returns its result once it has finished: the
// contract's run result, with every step's stop reason. When ctx ends first, the run is
// cancelled and ctx's error returned.
func (r *Reins) Run(ctx context.Context, def *workflow.Definition, input any) (protocol.Result, error) {
	id, err := r.Start(ctx, def, input)
	if err != nil {
		return protocol.Result{}, err
	}
	rec, err := r.client.Wait(ctx, id)
	if err != nil {
		if ctx.Err() != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = r.client.Cancel(cctx, id, "interrupted")
		}
		return protocol.Result{RunID: id}, err
	}
	return client.NewResult(def, rec), nil
}

// Get returns the record of run id ([ErrNotFound] when there is none).
func (r *Reins) Get(ctx context.Context, id string) (*client.Record, error) {
	return r.client.Get(ctx, id)
}

// List returns the records of the runs with status ("": all), oldest first.
func (r *Reins) List(ctx context.Context, status protocol.RunStatus) ([]*client.Record, error) {
	return r.client.List(ctx, status)
}

// Query returns one page of the runs q selects, oldest first, through the status index: its
// cost grows with the runs selected, not with every run kept.
func (r *Reins) Query(ctx context.Context, q Query) (Page, error) {
	return r.client.Query(ctx, q)
}

// Cancel cancels run id; reason says why ("": the engine says).
func (r *Reins) Cancel(ctx context.Context, id, reason string) error {
	return r.client.Cancel(ctx, id, reason)
}

// Approve approves what run id waits for at target (a step, or an agent's pending call), with
// a message.
func (r *Reins) Approve(ctx context.Context, id, target, message string) error {
	if err := r.StartWorkers(ctx); err != nil { // what the decision continues needs them
		return err
	}
	return r.client.Approve(ctx, id, target, message)
}

// Deny denies what run id waits for at target, with a message: what a denied call shows the
// model, or why an approval step failed.
func (r *Reins) Deny(ctx context.Context, id, target, message string) error {
	if err := r.StartWorkers(ctx); err != nil { // what the decision continues needs them
		return err
	}
	return r.client.Deny(ctx, id, target, message)
}

// Signal sends the named signal with data (any JSON-encodable value) to run id.
func (r *Reins) Signal(ctx context.Context, id, name string, data any) error {
	if err := r.StartWorkers(ctx); err != nil { // what the signal continues needs them
		return err
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("reins: the signal's data cannot be encoded as JSON: %w", err)
	}
	return r.client.Signal(ctx, id, name, raw)
}

// Watch yields the events of run id as the engine receives them, from its start on (a task's
// answer, a decision, a signal, a timer), and ends after the last one it took before the run
// finished; Get then gives the finished record. The watch may begin before or after the run
// starts: it misses nothing.
func (r *Reins) Watch(ctx context.Context, id string) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for u, err := range r.client.Watch(ctx, id, client.WatchOptions{Only: client.WatchEvents}) {
			if err != nil {
				yield(Event{}, err)
				return
			}
			if !yield(*u.Event, nil) {
				return
			}
		}
	}
}

// Close stops the worker and the engine, then NATS (the embedded server), and removes the
// temporary data directory when New made one.
func (r *Reins) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	workers := r.workers
	r.mu.Unlock()
	if workers != nil {
		workers.Stop()
	}
	if r.eng != nil {
		r.eng.Stop()
	}
	if r.box != nil {
		r.box.Close()
	}
	r.removeTmp()
	return nil
}

func (r *Reins) removeTmp() {
	if r.tmp != "" {
		_ = os.RemoveAll(r.tmp)
	}
}
