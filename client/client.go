package client

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/outbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// Config configures a Client.
type Config struct {
	// Conn is the connection to the deployment (required): [Dial] opens one.
	Conn *conn.Conn
	// Now is the clock of the start and cancel events; nil means [time.Now].
	Now func() time.Time
	// Principal is who the client acts as: the name its connection authenticated as (the
	// server's permissions let it publish a person's events only under that name, and the
	// engine reads who acted from the subject). "" means "admin", the operator of a data
	// directory ([natsbox.RoleAdmin]), as local commands are.
	Principal string
	// Roles are the roles of Principal, as the operator's configuration gives them, when the
	// caller knows them (the HTTP API does): what the registry checks a principal's right to
	// add versions of a name against (a writer "role:NAME", the admin role), and what tells at
	// once, as the engine would, a signal or resume the principal may not send. Nil: none but
	// what Principal "admin" implies; a role named by a workflow's approvers is left to the
	// engine.
	Roles []string
	// May reports whether the connection may publish on a subject (from [natsbox.Box.WhoAmI]),
	// so that the client tells a principal what its roles do not allow in one sentence
	// instead of waiting for an acknowledgement that never comes. Nil: it may publish on any.
	May func(subject string) bool
	// MaxInputBytes bounds a run input, human input or signal data the client sends; 0 means
	// [wire.DefaultMaxValue] (64 MiB, the default max_input_bytes of a server). Values too large
	// for a message are stored by reference ([wire.Values]).
	MaxInputBytes int64
}

// Client starts, reads, watches and cancels runs. It talks to engines only through NATS: the
// events it publishes and the records they save. It is safe for concurrent use.
type Client struct {
	conn      *conn.Conn
	closeConn bool // Dial opened conn: Close closes it
	js        jetstream.JetStream
	names     natsbox.Names // of conn: every stream, bucket and subject the client uses
	now       func() time.Time
	principal string
	roles     []string
	may       func(subject string) bool
	maxInput  int64

	mu      sync.Mutex
	runs    jetstream.KeyValue
	index   jetstream.KeyValue // natsbox.StatusBucket
	wfs     jetstream.KeyValue
	reg     jetstream.KeyValue // natsbox.RegistryBucket, opened by registry
	values  *wire.Values
	objects *natsbox.ObjectValues
	layout  natsbox.Layout // of conn: what a client that finds no layout creates

	defNames definitionNames // of registered versions, read once (RunWorkflows)
}

// New returns a client over cfg.Conn. It does no I/O until used.
func New(cfg Config) *Client {
	box := (*natsbox.Box)(cfg.Conn)
	c := &Client{conn: cfg.Conn, js: box.JetStream(), names: box.Names(), layout: box.Layout(), now: cfg.Now, principal: cfg.Principal, roles: slices.Clone(cfg.Roles), may: cfg.May, maxInput: cfg.MaxInputBytes}
	if c.maxInput <= 0 {
		c.maxInput = wire.DefaultMaxValue
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.principal == "" {
		c.principal = natsbox.RoleAdmin
	}
	return c
}

// buckets opens the runs and workflows buckets, creating the layout when they do not exist yet
// (no engine ran on this server).
func (c *Client) buckets(ctx context.Context) (runs, wfs jetstream.KeyValue, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs != nil {
		return c.runs, c.wfs, nil
	}
	var values *natsbox.ObjectValues
	var index jetstream.KeyValue
	open := func(ctx context.Context) (err error) {
		if runs, err = c.js.KeyValue(ctx, c.names.RunsBucket()); err != nil {
			return err
		}
		if wfs, err = c.js.KeyValue(ctx, c.names.WorkflowsBucket()); err != nil {
			return err
		}
		if index, err = c.js.KeyValue(ctx, c.names.StatusBucket()); err != nil {
			return err
		}
		values, err = natsbox.OpenValues(ctx, c.js, c.names)
		return err
	}
	err = natsbox.Retry(ctx, open)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		if err = natsbox.EnsureLayout(ctx, c.js, c.layout); err == nil {
			err = natsbox.Retry(ctx, open)
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("client: open the run buckets: %w", err)
	}
	c.runs, c.wfs, c.index, c.values, c.objects = runs, wfs, index, wire.NewValues(values, 0, c.maxInput), values
	return runs, wfs, nil
}

// Start stores the bundles and publishes the start event of a run of bs.Root with input (nil
// means null), and returns the run id: runID, or a new one when runID is "". runID is the
// client's choice, so it must be one a client may choose ([wire.CheckClientRunID]: none of the
// ids triggers, sub-runs and forks get). A run that exists is [ErrExists], and so is one whose
// start another Start published first (the stream took this start for a duplicate of it), even
// before the engine saved its record: a start retried with its id starts one run. Whose run
// exists, Origin tells.
func (c *Client) Start(ctx context.Context, bs *workflow.Bundles, input json.RawMessage, runID string) (string, error) {
	return c.StartWith(ctx, bs, input, StartOptions{RunID: runID})
}

// StartOptions are the options of a start (StartWith).
type StartOptions struct {
	// RunID is the run's id; "" means a new one ([NewRunID]).
	RunID string
	// Registered is the registered version bs is (Workflow, Bundles): the start says so, and
	// the run is shown as that version (Origin) when its definition is that version's.
	Registered *Registered
	// Trigger says RunID is a trigger's (trigger.RunID), which a client may not choose: for
	// the trigger service of a server only. Without it RunID must pass
	// [wire.CheckClientRunID].
	Trigger bool
	// As, for the server's own processes (the triggers of a reins serve), names the principal
	// the run is started as: the start goes on the run's engine subject
	// ([natsbox.Names.EngineSubject]), which only the engine's identity and admins may publish
	// on, and the engine admits it as that principal's own start and records it as started by
	// that principal. "": the client's own start, on its principal's subject.
	As string
}

// StartWith is Start with the options of o.
func (c *Client) StartWith(ctx context.Context, bs *workflow.Bundles, input json.RawMessage, o StartOptions) (string, error) {
	if bs == nil || bs.All[bs.Root] == nil {
		return "", errors.New("client: start: the bundles hold no root workflow")
	}
	runID := o.RunID
	switch {
	case runID == "":
		runID = NewRunID()
	case o.Trigger:
		if err := wire.CheckRunID(runID); err != nil || !strings.HasPrefix(runID, wire.TriggerRunIDPrefix) {
			return "", fmt.Errorf("client: start: run id %q is not a trigger's", runID)
		}
	default:
		if err := wire.CheckClientRunID(runID); err != nil {
			return "", fmt.Errorf("client: start: %w", err)
		}
	}
	if o.As != "" {
		if err := natsbox.CheckToken(o.As); err != nil {
			return "", fmt.Errorf("client: start run %s as %q: %w", runID, o.As, err)
		}
	}
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	if err := wire.CheckJSON(input, int(c.maxInput)); err != nil {
		return "", fmt.Errorf("client: the input of run %s %w", runID, err)
	}
	ev := &protocol.Event{RunID: runID, Type: protocol.EvStart, At: c.now().UTC(), Input: input, Item: -1, Workflow: bs.Root, OnBehalfOf: o.As}
	if o.Registered != nil {
		ev.Registered = &protocol.Registration{Name: o.Registered.Name, Version: o.Registered.Version}
	}
	if o.As == "" {
		if _, err := c.personSubject(ev, natsbox.SubmitKind); err != nil {
			return "", err // before anything is stored
		}
	}
	if err := c.bundlesFit(bs); err != nil {
		return "", err // before anything is stored
	}
	runs, wfs, err := c.buckets(ctx)
	if err != nil {
		return "", err
	}
	switch _, err := runs.Get(ctx, runID); {
	case err == nil:
		return "", fmt.Errorf("client: start run %s: %w", runID, ErrExists)
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return "", fmt.Errorf("client: start run %s: %w", runID, err)
	}
	if err := runstore.PutBundles(ctx, wfs, bs); err != nil {
		return "", fmt.Errorf("client: start run %s: %w", runID, err)
	}
	ack, err := c.publishAck(ctx, ev)
	if err != nil {
		return "", fmt.Errorf("client: start run %s: %w", runID, err)
	}
	if ack.Duplicate {
		return "", fmt.Errorf("client: start run %s: %w", runID, ErrExists)
	}
	return runID, nil
}

// NewRunID returns a new run id: "r-" and 20 random characters of [a-z2-7].
func NewRunID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return "r-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

// ErrForbidden is wrapped by the errors of what the client's principal may not do.
var ErrForbidden = errors.New("not allowed")

// publish publishes ev: what a person does (start, cancel, decide, resume, signal) on the
// subject of the client's principal, anything else on the subject of its maker
// (outbox.Subject); a start made As a principal (StartOptions.As, OnBehalfOf set) on the engine's.
func (c *Client) publish(ctx context.Context, ev *protocol.Event) error {
	_, err := c.publishAck(ctx, ev)
	return err
}

// publishAck is publish, returning the stream's acknowledgement: a duplicate only when the
// stream holds this very event (same message id, same subject).
func (c *Client) publishAck(ctx context.Context, ev *protocol.Event) (*jetstream.PubAck, error) {
	if _, _, err := c.buckets(ctx); err != nil {
		return nil, err
	}
	m, err := outbox.ValuesEventMsg(ctx, c.names, c.values, ev, "")
	if err != nil {
		return nil, err
	}
	if kind := wire.PersonKind(ev.Type); kind != "" && !(ev.Type == protocol.EvStart && ev.OnBehalfOf != "") {
		if m.Subject, err = c.personSubject(ev, kind); err != nil {
			return nil, err
		}
	}
	ack, err := c.js.PublishMsg(ctx, m)
	if err != nil {
		return nil, err
	}
	// A duplicate is this event sent before only when it came on the same subject: another
	// sender may have taken the event's message id first (outbox.Own).
	return outbox.Own(ctx, c.js, c.names, m, ack)
}

// personSubject is the subject of ev from the client's principal; a cancel goes as an
// approver's when the principal may not submit. A principal whose roles do not allow it gets
// ErrForbidden.
func (c *Client) personSubject(ev *protocol.Event, kind string) (string, error) {
	subj, err := c.names.PrincipalSubject(ev.RunID, kind, c.principal)
	if err != nil || c.may == nil || c.may(subj) {
		return subj, err
	}
	if ev.Type == protocol.EvCancel {
		if alt, err := c.names.PrincipalSubject(ev.RunID, natsbox.HumanKind, c.principal); err == nil && c.may(alt) {
			return alt, nil
		}
	}
	need := map[string]string{natsbox.SubmitKind: "submitter", natsbox.HumanKind: "approver"}[kind]
	return "", fmt.Errorf("client: principal %s may not %s: it needs the %s role (or admin): %w", c.principal, actName(ev.Type), need, ErrForbidden)
}

func actName(t protocol.EventType) string {
	switch t {
	case protocol.EvStart:
		return "start runs"
	case protocol.EvCancel:
		return "cancel runs"
	case protocol.EvDecision:
		return "decide approvals"
	case protocol.EvResume:
		return "resume runs"
	}
	return "signal runs"
}

// Get returns the record of run runID (a sub-run's id too); [ErrNotFound] when there is none.
func (c *Client) Get(ctx context.Context, runID string) (*Record, error) {
	if err := checkKey(runID); err != nil {
		return nil, err
	}
	runs, _, err := c.buckets(ctx)
	if err != nil {
		return nil, err
	}
	e, err := runs.Get(ctx, runID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("client: run %s: %w", runID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("client: read run %s: %w", runID, err)
	}
	rec, err := runstore.DecodeRecord(e)
	if err != nil {
		return nil, err
	}
	return rec, c.ReadValues(ctx, rec)
}

// ReadValues reads back, in place, the values of rec stored by reference ([wire.Values]): those
// of a record Watch yielded.
func (c *Client) ReadValues(ctx context.Context, rec *Record) error {
	if _, _, err := c.buckets(ctx); err != nil {
		return err
	}
	if err := runstore.InRun(ctx, c.values, rec.Run); err != nil {
		return fmt.Errorf("client: run %s: %w", rec.Run.ID, err)
	}
	return nil
}

// List returns the records of the runs started by clients (not sub-runs) with status ("": all),
// oldest first. A record that cannot be decoded is listed all the same, with StatusCorrupt and
// an error saying why.
func (c *Client) List(ctx context.Context, status protocol.RunStatus) ([]*Record, error) {
	if status != "" && status != StatusCorrupt {
		p, err := c.Query(ctx, Query{Status: status})
		return p.Records, err
	}
	runs, _, err := c.buckets(ctx)
	if err != nil {
		return nil, err
	}
	var recs []*Record
	for e, err := range natsbox.Entries(ctx, runs, ">") {
		if err != nil {
			return nil, fmt.Errorf("client: list runs: %w", err)
		}
		if strings.Contains(e.Key(), "/") {
			continue
		}
		rec, err := runstore.DecodeRecord(e)
		if err != nil { // never dropped: listed as corrupt, with why
			rec = runstore.CorruptRecord(e, err)
		}
		if status != "" && rec.Run.Status != status {
			continue
		}
		recs = append(recs, rec)
	}
	sortRecords(recs)
	return recs, nil
}

// Query selects runs through the status index ([Client.Query]): by status, by workflow, a page
// at a time.
type Query struct {
	// Status and Workflow select the runs of that status and that workflow's name ("": any).
	Status   protocol.RunStatus
	Workflow string
	// Limit bounds the runs of a page (0: no bound).
	Limit int
	// After is the Next of the page before: the page starts after it, in the page's order.
	After string
	// Newest lists the newest runs first (the HTTP API's order): a page then holds the runs
	// started before its After, and its Next is where the runs started earlier still begin. A
	// run started while a caller pages is on no page after the first, and none is missed or
	// repeated.
	Newest bool
}

// Page is one page of a Query's runs, oldest first (newest first for [Query.Newest]).
type Page struct {
	Records []*Record
	// Next is the After of the next page; "" when no run follows.
	Next string
}

// Query returns the runs q selects (sub-runs left out), oldest first (newest first when
// q.Newest), reading the index keys
// of the selection and the records of the page only: its cost grows with the runs selected,
// not with every run kept. A key left stale by a crash (its run has another status now, or was
// removed) is checked against the record and skipped. A record that cannot be decoded is in no
// index: List(ctx, StatusCorrupt) finds it.
func (c *Client) Query(ctx context.Context, q Query) (Page, error) {
	if q.Limit < 0 {
		return Page{}, fmt.Errorf("client: a query's limit is %d: want 0 (no bound) or more", q.Limit)
	}
	if q.After != "" {
		if !runstore.CheckCursor(q.After) {
			return Page{}, fmt.Errorf("client: %q is not a cursor that a page of runs gave (Page.Next, --after)", q.After)
		}
	}
	runs, _, err := c.buckets(ctx)
	if err != nil {
		return Page{}, err
	}
	set, err := natsbox.StoredKeys(ctx, c.js, c.names.StatusBucket(), runstore.StatusFilter(q.Status, q.Workflow))
	if err != nil {
		return Page{}, fmt.Errorf("client: list runs: %w", err)
	}
	var keys []runstore.IndexKey
	for k := range set {
		ik, ok := runstore.ParseStatusKey(k)
		if !ok || strings.Contains(ik.RunID, "/") {
			continue
		}
		if q.After == "" || !q.Newest && ik.Cursor > q.After || q.Newest && ik.Cursor < q.After {
			keys = append(keys, ik)
		}
	}
	slices.SortFunc(keys, func(a, b runstore.IndexKey) int {
		if q.Newest {
			return strings.Compare(b.Cursor, a.Cursor)
		}
		return strings.Compare(a.Cursor, b.Cursor)
	})
	var p Page
	for i, k := range keys {
		if n := len(p.Records); n > 0 && p.Records[n-1].Run.ID == k.RunID {
			continue // the run's stale key, next to its current one (same cursor)
		}
		if q.Limit > 0 && len(p.Records) == q.Limit {
			p.Next = keys[i-1].Cursor
			break
		}
		rec, err := c.indexed(ctx, runs, k)
		if err != nil {
			return Page{}, err
		}
		if rec != nil {
			p.Records = append(p.Records, rec)
		}
	}
	return p, nil
}

// indexed reads the record of index key k: nil when the key is stale.
func (c *Client) indexed(ctx context.Context, runs jetstream.KeyValue, k runstore.IndexKey) (*Record, error) {
	e, err := runs.Get(ctx, k.RunID)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, nil // removed since
	case err != nil:
		return nil, fmt.Errorf("client: list runs: read run %s: %w", k.RunID, err)
	}
	rec, err := runstore.DecodeRecord(e)
	if err != nil || rec.Run.Status != k.Status || k.Workflow != "-" && rec.Run.Workflow != k.Workflow {
		return nil, nil
	}
	return rec, nil
}

// sortRecords puts recs in the order List gives: oldest first, then by id.
func sortRecords(recs []*Record) {
	slices.SortFunc(recs, func(a, b *Record) int {
		return cmp.Or(a.Run.StartedAt.Compare(b.Run.StartedAt), strings.Compare(a.Run.ID, b.Run.ID))
	})
}

// Cancel publishes a cancel event for run runID with reason (""; the engine says why); the run
// ends cancelled once an engine decides it. [ErrNotFound] when there is no such run, [ErrFinished]
// when it has already finished.
func (c *Client) Cancel(ctx context.Context, runID, reason string) error {
	rec, err := c.Get(ctx, runID)
	if err != nil {
		return err
	}
	if rec.Finished() {
		return fmt.Errorf("client: cancel run %s: it ended %s: %w", runID, rec.Run.Status, ErrFinished)
	}
	if err := c.mayAct(ctx, rec, "cancel"); err != nil {
		return err
	}
	if err := c.publish(ctx, personCancel(runID, c.now().UTC(), reason)); err != nil {
		return fmt.Errorf("client: cancel run %s: %w", runID, err)
	}
	return nil
}

// WatchOptions say what Watch yields. The zero value yields the run's events from its start
// and the saves of its record, and ends with the finished run.
type WatchOptions struct {
	// Only limits what Watch yields to WatchRecords (the record after every save, starting with
	// the current one: no events) or WatchEvents (the events, no records). Zero: both.
	Only WatchKind
	// After resumes the events after this stream sequence (an [Update.Seq] Watch yielded, or
	// LastEvent's): none missed and none twice. 0 is from the start.
	After uint64
}

// WatchKind is what a Watch yields ([WatchOptions.Only]).
type WatchKind int

// What a Watch may be limited to.
const (
	// WatchAll yields events and records (the zero value).
	WatchAll WatchKind = iota
	// WatchRecords yields the record after every save, starting with the current one.
	WatchRecords
	// WatchEvents yields the events as the engine receives them.
	WatchEvents
)

// Watch yields what happens to run runID, as o says: by default each event of the run in the
// order it was stored, from the start (or after o.After) on, each with its values whole, and
// the saves of its record as the watch sees them, each after every event stored before it
// (the runs bucket keeps the last save, so not every save is seen). It ends after the record
// of the finished run (WatchEvents: after the last event stored before the run finished), or
// with ctx's error when ctx is done first. A run that does not exist yet is waited for; the
// watch starts when the iteration does.
//
// With WatchRecords it yields the record after every save, starting with the current one, and
// takes no consumer of the events: values too large for the record are references in what it
// yields; Get and Wait return them whole, and ReadValues reads them back.
func (c *Client) Watch(ctx context.Context, runID string, o WatchOptions) iter.Seq2[Update, error] {
	switch o.Only {
	case WatchRecords:
		return func(yield func(Update, error) bool) {
			for rec, err := range c.watchRecords(ctx, runID) {
				if !yield(Update{Record: rec}, err) {
					return
				}
			}
		}
	case WatchEvents:
		return func(yield func(Update, error) bool) {
			for u, err := range c.follow(ctx, runID, o.After) {
				if err != nil {
					yield(Update{}, err)
					return
				}
				if u.Event != nil && !yield(u, nil) {
					return
				}
			}
		}
	}
	return c.follow(ctx, runID, o.After)
}

// watchRecords yields the record of run runID after every save, starting with the current
// one, and ends after the record of the finished run.
func (c *Client) watchRecords(ctx context.Context, runID string) iter.Seq2[*Record, error] {
	return func(yield func(*Record, error) bool) {
		records, err := c.openWatch(ctx, runID)
		if err != nil {
			yield(nil, err)
			return
		}
		records(yield)
	}
}

// openWatch starts watching run runID now and returns the records as watchRecords yields them: every
// save from this moment on is seen, even one made before the iteration begins (the run bucket
// keeps only the last revision of a record, so a watch opened later would miss it). The watch
// ends when the iteration does, or with ctx: iterate the result, or cancel ctx.
func (c *Client) openWatch(ctx context.Context, runID string) (iter.Seq2[*Record, error], error) {
	if err := checkKey(runID); err != nil {
		return nil, err
	}
	runs, _, err := c.buckets(ctx)
	if err != nil {
		return nil, err
	}
	w, cancel, err := natsbox.StartWatch(ctx, func(ctx context.Context) (jetstream.KeyWatcher, error) { return runs.Watch(ctx, runID) })
	if err != nil {
		return nil, fmt.Errorf("client: watch run %s: %w", runID, err)
	}
	return func(yield func(*Record, error) bool) {
		defer cancel()
		defer func() { _ = w.Stop() }()
		for {
			var e jetstream.KeyValueEntry
			var ok bool
			select {
			case <-ctx.Done():
				yield(nil, fmt.Errorf("client: watch run %s: %w", runID, ctx.Err()))
				return
			case e, ok = <-w.Updates():
			}
			switch {
			case !ok:
				yield(nil, fmt.Errorf("client: watch run %s: the watch ended", runID))
				return
			case e == nil:
				continue // the current value, if any, was delivered
			case e.Operation() != jetstream.KeyValuePut:
				yield(nil, fmt.Errorf("client: run %s was deleted: %w", runID, ErrNotFound))
				return
			}
			rec, err := runstore.DecodeRecord(e)
			if !yield(rec, err) || err != nil || rec.Finished() {
				return
			}
		}
	}, nil
}

// Wait returns the record of run runID once it has finished.
func (c *Client) Wait(ctx context.Context, runID string) (*Record, error) {
	for rec, err := range c.watchRecords(ctx, runID) {
		if err != nil {
			return nil, err
		}
		if rec.Finished() {
			return rec, c.ReadValues(ctx, rec)
		}
	}
	return nil, fmt.Errorf("client: wait for run %s: the watch ended", runID)
}

// Result returns the result of the run rec holds, with its steps in the order of its
// definition (read from the workflows bucket).
func (c *Client) Result(ctx context.Context, rec *Record) (protocol.Result, error) {
	def, err := c.Definition(ctx, rec)
	if err != nil {
		return protocol.Result{}, err
	}
	return NewResult(def, rec), nil
}

// Definition returns the definition the run of rec was started with.
func (c *Client) Definition(ctx context.Context, rec *Record) (*workflow.Definition, error) {
	if rec == nil || rec.Run == nil {
		return nil, errors.New("client: no run record")
	}
	_, wfs, err := c.buckets(ctx)
	if err != nil {
		return nil, err
	}
	b, err := runstore.NewStore(wfs).Get(ctx, rec.Run.Hash)
	if err != nil {
		return nil, fmt.Errorf("client: run %s: %w", rec.Run.ID, err)
	}
	return b.Definition, nil
}

// Events returns the events of run runID stored in REINS_EVENTS, in order. Messages that are
// not events of the run are left out. [ErrNotFound] when the run has neither events nor a record.
func (c *Client) Events(ctx context.Context, runID string) ([]protocol.Event, error) {
	s, filters, last, err := c.runEvents(ctx, runID)
	if err != nil {
		return nil, err
	}
	if last == 0 {
		if _, err := c.Get(ctx, runID); err != nil {
			return nil, err
		}
		return []protocol.Event{}, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: filters, InactiveThreshold: 10 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("client: events of run %s: %w", runID, err)
	}
	defer dropConsumer(s, cons)
	evs, err := c.readEvents(ctx, cons, runID, last)
	if err != nil {
		return nil, err
	}
	for i := range evs {
		if err := c.values.InEvent(ctx, &evs[i]); err != nil {
			return nil, fmt.Errorf("client: event %d of run %s: %w", i+1, runID, err)
		}
	}
	return evs, nil
}

// EventPage is one page of a run's events (EventsPage).
type EventPage struct {
	Events []protocol.Event
	// Last is the stream sequence of the page's last event (the After of the page that
	// follows it); After of the request when the page is empty.
	Last uint64
	// More reports whether events of the run were stored after the page already.
	More bool
}

// EventsPage returns the events of run runID stored after stream sequence after (0: from the
// first), in order, at most limit of them (limit > 0), each with its values whole: what it
// reads grows with the page, not with the run's events. [ErrNotFound] when the run has
// neither events nor a record.
func (c *Client) EventsPage(ctx context.Context, runID string, after uint64, limit int) (EventPage, error) {
	page := EventPage{Events: []protocol.Event{}, Last: after}
	if limit <= 0 {
		return page, fmt.Errorf("client: a page of events of run %s has a limit of %d: want 1 or more", runID, limit)
	}
	s, filters, last, err := c.runEvents(ctx, runID)
	if err != nil {
		return page, err
	}
	if last == 0 {
		if _, err := c.Get(ctx, runID); err != nil {
			return page, err
		}
	}
	if last <= after {
		return page, nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, InactiveThreshold: 10 * time.Second}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	cons, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return page, fmt.Errorf("client: events of run %s: %w", runID, err)
	}
	defer dropConsumer(s, cons)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs := make(chan seqEvent)
	go c.pumpEvents(rctx, cons, runID, msgs, jetstream.PullMaxMessages(min(limit, 500)+1))
	for page.Last < last && len(page.Events) < limit {
		m := <-msgs
		if m.err != nil {
			return page, fmt.Errorf("client: events of run %s: %w", runID, m.err)
		}
		if m.ev != nil {
			if err := c.values.InEvent(ctx, m.ev); err != nil {
				return page, fmt.Errorf("client: event of run %s at %d: %w", runID, m.seq, err)
			}
			page.Events = append(page.Events, *m.ev)
		}
		page.Last = m.seq
	}
	page.More = page.Last < last
	return page, nil
}

// Update is what Watch yields: an event of the run with its stream sequence, or a save of its
// record.
type Update struct {
	Event  *protocol.Event
	Seq    uint64
	Record *Record
}

// LastEvent returns the stream sequence of the last event stored for run runID (0: none), for
// a Watch that shows only what comes after it.
func (c *Client) LastEvent(ctx context.Context, runID string) (uint64, error) {
	filters, err := c.names.RunEventFilters(runID)
	if err != nil {
		return 0, fmt.Errorf("client: %w", err)
	}
	s, err := c.js.Stream(ctx, c.names.EventsStream())
	if err != nil {
		return 0, fmt.Errorf("client: events of run %s: %w", runID, err)
	}
	last, err := lastSequence(ctx, s, filters)
	if err != nil {
		return 0, fmt.Errorf("client: events of run %s: %w", runID, err)
	}
	return last, nil
}

// follow is Watch of events and records resumed after stream sequence after: the events
// stored after it, none missed and none twice, and the saves of the record from now on, the
// first as soon as the events up to the current record are yielded. A sequence that is not one
// of the run's events works all the same: the events after it are yielded.
func (c *Client) follow(ctx context.Context, runID string, after uint64) iter.Seq2[Update, error] {
	return func(yield func(Update, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		records, err := c.openWatch(ctx, runID)
		if err != nil {
			yield(Update{}, err)
			return
		}
		filters, err := c.names.RunEventFilters(runID)
		if err != nil {
			yield(Update{}, fmt.Errorf("client: %w", err))
			return
		}
		s, err := c.js.Stream(ctx, c.names.EventsStream())
		if err != nil {
			yield(Update{}, fmt.Errorf("client: events of run %s: %w", runID, err))
			return
		}
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, InactiveThreshold: 10 * time.Second}
		if after > 0 {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
		}
		cons, err := s.OrderedConsumer(ctx, cfg)
		if err != nil {
			yield(Update{}, fmt.Errorf("client: events of run %s: %w", runID, err))
			return
		}
		defer dropConsumer(s, cons)
		recs := make(chan recordOrErr)
		go pumpRecords(ctx, records, recs)
		msgs := make(chan seqEvent)
		go c.pumpEvents(ctx, cons, runID, msgs)
		f := follower{c: c, runID: runID, msgs: msgs, yield: yield, seen: after}
		for {
			select {
			case r := <-recs:
				if r.err != nil {
					yield(Update{}, r.err)
					return
				}
				last, err := lastSequence(ctx, s, filters)
				if err != nil {
					yield(Update{}, fmt.Errorf("client: events of run %s: %w", runID, err))
					return
				}
				if !f.upTo(ctx, last) || !yield(Update{Record: r.rec}, nil) || r.rec.Finished() {
					return
				}
			case m := <-msgs:
				if !f.take(ctx, m) {
					return
				}
			case <-ctx.Done(): // the pumps may stop without a word once ctx is done
				yield(Update{}, fmt.Errorf("client: events of run %s: %w", runID, ctx.Err()))
				return
			}
		}
	}
}

// recordOrErr is a record Watch's watch yielded, or the error that ended it.
type recordOrErr struct {
	rec *Record
	err error
}

// pumpRecords sends what records yields to out until it ends or ctx is done.
func pumpRecords(ctx context.Context, records iter.Seq2[*Record, error], out chan<- recordOrErr) {
	for rec, err := range records {
		select {
		case out <- recordOrErr{rec, err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// follower is Watch's reading of the events: what it has seen, and where it yields.
type follower struct {
	c     *Client
	runID string
	msgs  <-chan seqEvent
	yield func(Update, error) bool
	seen  uint64 // the stream sequence of the last message read
}

// take yields the event m carries, if any; it reports whether to go on.
func (f *follower) take(ctx context.Context, m seqEvent) bool {
	if m.err == nil && m.ev != nil {
		m.err = f.c.values.InEvent(ctx, m.ev)
	}
	if m.err != nil {
		f.yield(Update{}, fmt.Errorf("client: events of run %s: %w", f.runID, m.err))
		return false
	}
	f.seen = m.seq
	return m.ev == nil || f.yield(Update{Event: m.ev, Seq: m.seq}, nil)
}

// upTo yields the events up to stream sequence last; it reports whether to go on.
func (f *follower) upTo(ctx context.Context, last uint64) bool {
	for f.seen < last {
		select {
		case m := <-f.msgs:
			if !f.take(ctx, m) {
				return false
			}
		case <-ctx.Done():
			f.yield(Update{}, fmt.Errorf("client: events of run %s: %w", f.runID, ctx.Err()))
			return false
		}
	}
	return true
}

// seqEvent is a message of a run's events as pumpEvents reads it: its stream sequence, and the
// event when it is one of the run's (nil for a stray message), or the error that ends the read.
type seqEvent struct {
	seq uint64
	ev  *protocol.Event
	err error
}

// pumpEvents sends the messages of cons to out until an error, or until ctx is done; opts are
// those of the pull.
func (c *Client) pumpEvents(ctx context.Context, cons jetstream.Consumer, runID string, out chan<- seqEvent, opts ...jetstream.PullMessagesOpt) {
	send := func(m seqEvent) bool {
		select {
		case out <- m:
			return true
		case <-ctx.Done():
			return false
		}
	}
	it, err := cons.Messages(opts...)
	if err != nil {
		send(seqEvent{err: err})
		return
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			send(seqEvent{err: err})
			return
		}
		md, err := m.Metadata()
		if err != nil {
			send(seqEvent{err: err})
			return
		}
		var ev *protocol.Event
		if e, err := wire.DecodeEvent(m.Data()); err == nil && e.RunID == runID && c.senderOK(m.Subject(), e) {
			ev = e
		}
		if !send(seqEvent{seq: md.Sequence.Stream, ev: ev}) {
			return
		}
	}
}

// runEvents returns the events stream, the subject filters of run runID's events and the
// stream sequence of its last event (0: none yet): where every read of a run's events begins.
func (c *Client) runEvents(ctx context.Context, runID string) (jetstream.Stream, []string, uint64, error) {
	if _, _, err := c.buckets(ctx); err != nil {
		return nil, nil, 0, err
	}
	filters, err := c.names.RunEventFilters(runID)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("client: %w", err)
	}
	s, err := c.js.Stream(ctx, c.names.EventsStream())
	if err != nil {
		return nil, nil, 0, fmt.Errorf("client: events of run %s: %w", runID, err)
	}
	last, err := lastSequence(ctx, s, filters)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("client: events of run %s: %w", runID, err)
	}
	return s, filters, last, nil
}

// dropConsumer removes the consumer behind cons, an ordered consumer whose reading ended (or
// never began: then there is none). A read of a run's events leaves nothing behind on the
// server: each consumer left would live its inactive threshold, and a reader that asks again
// and again (GET /v1/runs/{id} in a loop) would pile them up until the server refuses to make
// more, for everyone. It waits at most 2 s, and a consumer it could not remove still goes
// after its inactive threshold.
func dropConsumer(s jetstream.Stream, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.DeleteConsumer(ctx, info.Name)
}

// lastSequence is the stream sequence of the last message on any of filters (0: none).
func lastSequence(ctx context.Context, s jetstream.Stream, filters []string) (uint64, error) {
	var last uint64
	for _, f := range filters {
		m, err := s.GetLastMsgForSubject(ctx, f)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return 0, err
		default:
			last = max(last, m.Sequence)
		}
	}
	return last, nil
}

// senderOK reports whether the engine takes ev from the sender of subject (wire.Sender,
// wire.CheckSender): a run's history holds no event the engine refused.
func (c *Client) senderOK(subject string, ev *protocol.Event) bool {
	runID, kind, principal, ok := c.names.ParseEventSubject(subject)
	return ok && wire.Sender(runID, kind, principal, ev) && wire.CheckSender(kind, principal, ev) == nil
}

// readEvents reads the events of run runID from an ordered consumer, up to stream sequence last.
func (c *Client) readEvents(ctx context.Context, cons jetstream.Consumer, runID string, last uint64) ([]protocol.Event, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs := make(chan seqEvent)
	go c.pumpEvents(ctx, cons, runID, msgs)
	evs := []protocol.Event{}
	for {
		m := <-msgs
		if m.err != nil {
			return nil, fmt.Errorf("client: events of run %s: %w", runID, m.err)
		}
		if m.ev != nil {
			evs = append(evs, *m.ev)
		}
		if m.seq >= last {
			return evs, nil
		}
	}
}

// checkKey refuses run ids that cannot be keys of the runs bucket or would watch several.
func checkKey(runID string) error {
	if runID == "" {
		return errors.New("client: the run id is empty")
	}
	for i := 0; i < len(runID); i++ {
		c := runID[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '/') {
			return fmt.Errorf("client: run id %q: the character %q at byte %d is not one of A-Z a-z 0-9 _ - /", runID, c, i)
		}
	}
	return nil
}

// personCancel is a cancel a person sends: with a nonce, so that the run records it once.
func personCancel(runID string, at time.Time, reason string) *protocol.Event {
	ev := outbox.CancelEvent(runID, at, reason)
	ev.Nonce = wire.Nonce()
	return ev
}
