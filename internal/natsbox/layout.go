package natsbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/intern"
)

// Streams, buckets and subjects of the reins layout (ARCHITECTURE.md has the table).
const (
	// TasksStream holds one message per unit of work (a task step, an agent_loop iteration), on
	// TaskSubject(handler). Work-queue retention: a message is removed once a worker acks it.
	TasksStream = "REINS_TASKS"
	// EventsStream holds the events of runs, on EventSubject(runID): the run's partition, then
	// its id. Limits retention.
	EventsStream = "REINS_EVENTS"
	// DLQStream holds the tasks that exhausted their attempts, on DLQSubject(handler), for 30 days.
	DLQStream = "REINS_DLQ"

	// TaskSubjects, EventSubjects and DLQSubjects are the subject filters of the three streams.
	TaskSubjects  = "reins.task.>"
	EventSubjects = "reins.event.>"
	DLQSubjects   = "reins.dlq.>"

	// RunsBucket is the KV bucket of run state: key = run id, history 1, written with
	// compare-and-set on the revision (KeyValue.Update) so that two writers cannot both win.
	RunsBucket = "reins_runs"
	// StatusBucket indexes runs by status and workflow: key = STATUS.WORKFLOW.STARTED.RUNID
	// (runstore.StatusKey; history 1). The engine writes a run's key for its new status before it
	// saves the record and removes the old key after, so every run has the key of its saved
	// status (and, after a crash, maybe a stale one that readers check against the record):
	// listing the runs of one status or workflow reads those only.
	StatusBucket = "reins_status"
	// ServedBucket says what the running workers serve: key = KIND.NAME.WORKER (kind handler,
	// tool or model; NAME may hold dots), written when a worker starts and every ServedEvery
	// while it runs, removed when it stops, and gone ServedTTL after its last write when it died.
	// A client reads it to tell, when a run is submitted, that no worker serves a name the
	// workflow needs (the run would wait until one does).
	ServedBucket = "reins_served"
	// ServedEvery and ServedTTL: how often a worker writes what it serves, and how long a write
	// stays.
	ServedEvery = 20 * time.Second
	ServedTTL   = 3 * ServedEvery
	// ServedHandler, ServedTool and ServedModel are the kinds of the names in ServedBucket.
	ServedHandler = "handler"
	ServedTool    = "tool"
	ServedModel   = "model"
	// CheckpointsBucket is the KV bucket of worker checkpoints (history 1).
	CheckpointsBucket = "reins_checkpoints"
	// WorkflowsBucket is the KV bucket of workflow definitions: key = definition hash, so that
	// every engine and worker reads the definition a run was started with (history 1).
	WorkflowsBucket = "reins_workflows"
	// EnginesBucket holds who decides which runs (history 1, the engines' alone): key
	// "member.ID" for each running engine, written every lease heartbeat, and "partition.NN"
	// naming the engine that consumes the events of partition NN (package runner).
	EnginesBucket = "reins_engines"
	// EffectsBucket is the KV bucket of the recorded results of side-effecting tool calls, by
	// wire.EffectKey of the call's idempotency key (history 1): an iteration that runs again
	// after a crash gets the recorded result instead of doing the side effect twice.
	EffectsBucket = "reins_effects"
	// RegistryBucket holds the workflows registered by name through the HTTP API (history 1):
	// key NAME for the latest version of each name, NAME.vN for version N, each kept for as long
	// as the bucket (package client, Register). Only the engine's process and admins write it:
	// a submitter registers through the API, which validates what it stores.
	RegistryBucket = "reins_registry"
	// LimitsBucket holds the shared rate limits of model providers (package ratelimit): key
	// "provider.PROVIDER" or "model.PROVIDER.MODEL" (the model's name escaped: ratelimit.Key), one
	// record per scope (its buckets, pause, slots and queue) written with compare-and-set on the
	// revision by every worker. A key unused for LimitsMaxAge goes: its state then is a fresh
	// scope's, which it would be anyway by then.
	LimitsBucket = "reins_limits"
	// LimitsMaxAge is how long LimitsBucket keeps a record not written since.
	LimitsMaxAge = time.Hour
	// TriggersBucket holds the state of each schedule trigger of the registered workflows
	// (history 1, the engines' alone): key "schedule.WORKFLOW.TRIGGER", the latest due time
	// decided, written with compare-and-set once its runs were started (package trigger).
	TriggersBucket = "reins_triggers"
	// ConcurrencyBucket holds the concurrency keys of workflows (history 1, the engines' alone):
	// key "key.HASH" for each workflow and rendered key with runs active or queued (the runs
	// holding its slots and the queue, oldest start first), and "run.HASH" for each such run,
	// naming its key; every change a compare-and-set (package runner, slots.go).
	ConcurrencyBucket = "reins_concurrency"
	// SessionsBucket holds the conversations of agent steps with a session (package session):
	// key KEY for a session's head, KEY.GEN.N for the chunks of a large one (history 1, max
	// age SessionsMaxAge). Workers write it; readers list and show; admins delete.
	SessionsBucket = "reins_sessions"
	// SessionsMaxAge is how long SessionsBucket keeps a key after its last write: the bound of
	// a step's session_ttl (workflow.MaxSessionTTL), past which a session is gone whatever
	// its ttl said.
	SessionsMaxAge = 90 * 24 * time.Hour

	// CancelSubjects is the core NATS (not stored) subject filter on which the engine announces
	// runs that ended, so that workers cancel their handlers at once: CancelSubject(runID).
	CancelSubjects = "reins.cancel.>"
	// DeltaSubjects is the core NATS (not stored) subject filter of the token deltas of llm and
	// agent steps with stream = true: DeltaSubject(runID). Workers publish them, fire and forget;
	// the API relays them to the run's watchers (GET /v1/runs/{id}/events).
	DeltaSubjects = "reins.delta.>"

	// DefaultDuplicates is the duplicate window of the streams: a message published again with
	// the same Nats-Msg-Id within it is stored once.
	DefaultDuplicates = 2 * time.Minute
	// DefaultDLQMaxAge is how long the DLQ keeps a message.
	DefaultDLQMaxAge = 30 * 24 * time.Hour

	// MetadataKey marks the streams and buckets EnsureLayout made; its value is LayoutVersion.
	// A stream of the same name without it and with other subjects is someone else's, and
	// EnsureLayout refuses to change it.
	MetadataKey = "reins.layout"
	// LayoutVersion is the version of the layout this package creates. 2: the events of runs
	// travel in partitions ("reins.event.NN.RUN"), and the engines share them (EnginesBucket).
	LayoutVersion = "2"

	// MaxTokenLen is the longest subject token CheckToken accepts, in bytes.
	MaxTokenLen = 256
)

// Layout tunes the streams and buckets EnsureLayout creates. The zero value is the default layout.
type Layout struct {
	// Names are the names of the namespace whose streams and buckets are made; the zero value
	// is the default namespace's.
	Names Names
	// Replicas of every stream, KV bucket and object store. 0 keeps what exists and creates
	// with 1. N raises what has fewer to N and never lowers what has more: an operator who
	// scaled a stream up keeps it, and EnsureLayout reports it (Logger). Only a clustered
	// external server can have more than 1.
	Replicas int
	// Logger receives the report of streams and buckets whose replicas differ from Replicas
	// (kept or raised), with their names. Nil reports nothing.
	Logger *slog.Logger
	// MaxMsgSize bounds one message of TASKS, EVENTS and DLQ, headers included; 0 means the
	// server's max payload (1 MiB by default), so that an oversized message fails at publish.
	MaxMsgSize int32
	// Duplicates is the duplicate window of the three streams; 0 means DefaultDuplicates.
	Duplicates time.Duration
	// DLQMaxAge is how long the DLQ keeps a message; 0 means DefaultDLQMaxAge.
	DLQMaxAge time.Duration
	// EffectsMaxAge is how long the record of a side-effecting tool call is kept; 0 means
	// DefaultEffectsMaxAge.
	EffectsMaxAge time.Duration
}

// DefaultEffectsMaxAge is how long reins_effects keeps a record: a record serves an iteration
// that runs again after a crash or a human's decision, so it must outlive the longest pause a
// run may take (its deadline), but not grow forever.
const DefaultEffectsMaxAge = 30 * 24 * time.Hour

// ErrBadToken is wrapped by the errors of CheckToken and the subject builders.
var ErrBadToken = errors.New("not a valid NATS subject token")

// CheckToken reports whether s can be one token of a NATS subject: not empty, at most
// MaxTokenLen bytes of valid UTF-8, and free of '.', '*', '>', whitespace and control characters
// (dots separate tokens and the others are wildcards or break the protocol). Nothing is escaped:
// a handler or run id that fails is refused with an error saying why.
func CheckToken(s string) error {
	if err := checkToken(s); err != nil {
		return fmt.Errorf("natsbox: %w", err)
	}
	return nil
}

func checkToken(s string) error {
	if plainToken(s) {
		return nil
	}
	return checkTokenRunes(s)
}

// plainToken reports a token of printable ASCII without '.', '*' or '>', at most MaxTokenLen
// bytes: what run ids and handlers are, checked a byte at a time on the path of every event
// (checkTokenRunes decodes each rune and asks package unicode). Anything else is for
// checkTokenRunes to take or refuse, with the reason; FuzzCheckToken holds the two to the same
// answers.
func plainToken(s string) bool {
	if s == "" || len(s) > MaxTokenLen {
		return false
	}
	for i := range len(s) {
		switch b := s[i]; {
		case b <= ' ' || b >= 0x7f: // control characters, the space, and all but ASCII
			return false
		case b == '.' || b == '*' || b == '>':
			return false
		}
	}
	return true
}

// checkTokenRunes is checkToken rune by rune, with the reason of a refusal.
func checkTokenRunes(s string) error {
	bad := func(format string, v ...any) error {
		shown := s
		if len(shown) > 32 {
			shown = shown[:32] + "…"
		}
		return fmt.Errorf("%q is %w: %s", shown, ErrBadToken, fmt.Sprintf(format, v...))
	}
	switch {
	case s == "":
		return bad("it is empty")
	case len(s) > MaxTokenLen:
		return bad("it is %d bytes long, more than %d", len(s), MaxTokenLen)
	case !utf8.ValidString(s):
		return bad("it is not valid UTF-8")
	}
	for i, r := range s {
		switch {
		case r == '.':
			return bad("it has '.' (which separates tokens) at byte %d", i)
		case r == '*' || r == '>':
			return bad("it has the wildcard '%c' at byte %d", r, i)
		case unicode.IsSpace(r):
			return bad("it has whitespace (%U) at byte %d", r, i)
		case unicode.IsControl(r):
			return bad("it has the control character %U at byte %d", r, i)
		}
	}
	return nil
}

func subject(prefix, kind, token string) (string, error) {
	if err := checkToken(token); err != nil {
		return "", fmt.Errorf("natsbox: %s %w", kind, err)
	}
	return prefix + token, nil
}

// TaskSubjectPrefix begins the subject of every message of REINS_TASKS.
const TaskSubjectPrefix = "reins.task."

// TaskSubject returns the subject of the tasks of handler in the default namespace:
// "reins.task.HANDLER". A handler name may have dots ("payments.charge"): each part between them
// must be a token (CheckToken).
func TaskSubject(handler string) (string, error) { return Names{}.TaskSubject(handler) }

// CheckHandler reports whether handler can name a handler: one or more tokens (CheckToken)
// separated by dots.
func CheckHandler(handler string) error {
	if handler == "" {
		return fmt.Errorf("natsbox: handler %w", checkToken(handler))
	}
	for part := range strings.SplitSeq(handler, ".") {
		if err := checkToken(part); err != nil {
			return fmt.Errorf("natsbox: handler %q: a part between dots %w", handler, err)
		}
	}
	return nil
}

// handlerSubject is prefix+handler, the same string each time: a deployment has a few
// handlers, and every task's subject was an allocation.
func handlerSubject(prefix, handler string) (string, error) {
	if err := CheckHandler(handler); err != nil {
		return "", err
	}
	var buf [128]byte
	return intern.Bytes(append(append(buf[:0], prefix...), handler...)), nil
}

// Partitions is how many partitions the events of runs are spread over: a run's events all
// travel in the partition Partition(runID), which one engine at a time consumes (package
// runner). It is part of the protocol, fixed for a deployment: every publisher computes it.
const Partitions = 16

// Partition returns the partition of run runID: the FNV-1a 32-bit hash of its id, modulo
// Partitions.
func Partition(runID string) int {
	h := uint32(2166136261)
	for i := 0; i < len(runID); i++ {
		h ^= uint32(runID[i])
		h *= 16777619
	}
	return int(h % Partitions)
}

// PartitionToken returns the subject token of partition p: two decimal digits.
func PartitionToken(p int) string {
	var b [2]byte
	return string(appendPartitionToken(b[:0], p))
}

// appendPartitionToken appends partition p's two digits to b.
func appendPartitionToken(b []byte, p int) []byte { return append(b, '0'+byte(p/10), '0'+byte(p%10)) }

// PartitionSubjects returns the subject filter of the events of partition p in the default
// namespace: "reins.event.NN.>".
func PartitionSubjects(p int) string { return Names{}.PartitionSubjects(p) }

const (
	eventPrefix  = "reins.event."
	dlqPrefix    = "reins.dlq."
	cancelPrefix = "reins.cancel."
	deltaPrefix  = "reins.delta."
)

// EventSubject returns the subject of the events of run runID in the default namespace:
// "reins.event.NN.RUNID", NN its partition.
func EventSubject(runID string) (string, error) { return Names{}.EventSubject(runID) }

// DLQSubject returns the subject of the dead tasks of handler in the default namespace:
// "reins.dlq.HANDLER".
func DLQSubject(handler string) (string, error) { return Names{}.DLQSubject(handler) }

// CancelSubject returns the subject on which the end of run runID is announced in the default
// namespace: "reins.cancel.RUNID".
func CancelSubject(runID string) (string, error) { return Names{}.CancelSubject(runID) }

// EnsureLayout creates the streams and buckets of the layout, or updates them to l. It is
// idempotent and safe to run from several processes at once. An existing stream of the same name
// that reins did not create (no MetadataKey) and that has other subjects is refused; a change the
// server cannot make (retention to or from work queue, storage type) fails with an error naming
// the stream.
func EnsureLayout(ctx context.Context, js jetstream.JetStream, l Layout) error {
	if err := l.check(); err != nil {
		return err
	}
	maxMsg := l.MaxMsgSize
	if maxMsg == 0 {
		maxMsg = int32(min(js.Conn().MaxPayload(), int64(1<<31-1)))
	}
	r := &replicaReport{asked: l.Replicas}
	for _, cfg := range l.streams(maxMsg) {
		if err := layoutStep(ctx, js, "stream "+cfg.Name, func(ctx context.Context) error { return ensureStream(ctx, js, cfg, r) }); err != nil {
			return err
		}
	}
	for _, cfg := range l.buckets() {
		if err := layoutStep(ctx, js, "KV bucket "+cfg.Bucket, func(ctx context.Context) error { return ensureBucket(ctx, js, cfg, r) }); err != nil {
			return err
		}
	}
	obs := l.objectStore()
	if err := layoutStep(ctx, js, "object store "+obs.Bucket, func(ctx context.Context) error { return ensureObjectStore(ctx, js, obs, r) }); err != nil {
		return err
	}
	r.log(l.Logger)
	return layoutStep(ctx, js, "the keeper message of stream "+l.Names.TasksStream(), func(ctx context.Context) error { return ensureKeeper(ctx, js, l.Names) })
}

// layoutStep runs step, the setting up of what (a stream, a bucket), as retryTimeouts does,
// ended at once by a permission the NATS server refused meanwhile; its error says what it was
// setting up and why it stopped: the subject refused, or no answer in time.
func layoutStep(ctx context.Context, js jetstream.JetStream, what string, step func(context.Context) error) error {
	err := retryTimeouts(ctx, placementGrace, refusable(js.Conn(), step))
	var refused *PermissionError
	switch {
	case errors.As(err, &refused):
		return fmt.Errorf("natsbox: setting up %s: %w", what, err)
	case timedOut(err):
		return fmt.Errorf("natsbox: setting up %s: the NATS server gave no answer in time (%s a try): %w", what, layoutAttempt, err)
	}
	return err
}

// replicaReport decides the replicas of each stream and bucket (Layout.Replicas) and notes
// those that differ from what was asked.
type replicaReport struct {
	asked        int
	kept, raised []string // "NAME (R3)"
}

// replicas is what a stream or bucket named name, which has have replicas (0: it does not
// exist), gets: asked, never fewer than it has; 1 for a new one when nothing is asked.
func (r *replicaReport) replicas(name string, have int) int {
	switch {
	case have == 0:
		return max(r.asked, 1)
	case r.asked == 0 || have == r.asked:
		return have
	case have > r.asked:
		r.kept = append(r.kept, fmt.Sprintf("%s (R%d)", name, have))
		return have
	default:
		r.raised = append(r.raised, fmt.Sprintf("%s (R%d)", name, have))
		return r.asked
	}
}

// log reports the streams and buckets that keep more replicas than asked, and those raised,
// each once (a step of EnsureLayout that timed out is run again, and notes its name again).
func (r *replicaReport) log(l *slog.Logger) {
	if l == nil {
		return
	}
	slices.Sort(r.kept)
	slices.Sort(r.raised)
	r.kept, r.raised = slices.Compact(r.kept), slices.Compact(r.raised)
	if len(r.kept) > 0 {
		l.Warn(fmt.Sprintf("these streams and buckets have more replicas than the %d asked, and keep them (reins never lowers replicas): %s", r.asked, strings.Join(r.kept, ", ")))
	}
	if len(r.raised) > 0 {
		l.Info(fmt.Sprintf("raised to %d replicas: %s", r.asked, strings.Join(r.raised, ", ")))
	}
}

// replicaErr explains the error of creating or updating a stream or bucket to n replicas when
// the server has no room for them: it is not clustered, or has fewer servers with JetStream.
func replicaErr(what string, n int, err error) error {
	var api *jetstream.APIError
	if n > 1 && errors.As(err, &api) {
		switch api.ErrorCode {
		case codeReplicasNotSupported, codeInsufficientResources, codeNoPeers:
			return fmt.Errorf("natsbox: %s needs %d replicas, and the NATS server cannot place them: it is not clustered, or its cluster has fewer than %d servers with JetStream (ask for fewer with --replicas, or add servers): %w", what, n, n, err)
		}
	}
	return err
}

// The JetStream API's error codes (nats-server's jetstream_errors_generated.go) of a stream
// whose replicas cannot be placed.
const (
	codeNoPeers               jetstream.ErrorCode = 10005
	codeInsufficientResources jetstream.ErrorCode = 10023
	codeReplicasNotSupported  jetstream.ErrorCode = 10074
)

// layoutAttempt bounds one try of a step of EnsureLayout, and layoutAttempts the tries when
// the caller's context has no deadline. A server busy starting several processes at once on a
// loaded machine, or a cluster electing a meta leader, can leave a request unanswered; waited for
// with the caller's context, a lost answer would hold the start until that context ends (it held
// tests' starts for their whole 2 minutes). Every step is idempotent, so it is asked again.
const layoutAttempts = 3

var layoutAttempt = 5 * time.Second // a variable for the tests

// placementGrace bounds how long a step of EnsureLayout is tried again while the cluster has
// no peer online to place a replica on: a cluster that is forming (its nodes started with
// reins, as a compose file does) or whose node restarts places them within seconds; one with
// too few servers is reported after it. placementPause is the wait between those tries.
const (
	placementGrace = 15 * time.Second
	placementPause = 250 * time.Millisecond
)

// retryTimeouts runs step, each time within layoutAttempt, until it succeeds or fails with an
// error not worth trying again: a timeout is tried again until ctx ends (layoutAttempts times
// when ctx has no deadline), a replica that cannot be placed yet (codeNoPeers) during grace. It
// gives up at once when ctx is done.
func retryTimeouts(ctx context.Context, grace time.Duration, step func(context.Context) error) error {
	deadline := time.Now().Add(grace)
	_, limited := ctx.Deadline()
	var err error
	for attempts := 0; limited || attempts < layoutAttempts; {
		actx, cancel := context.WithTimeout(ctx, layoutAttempt)
		err = step(actx)
		cancel()
		switch {
		case err == nil || ctx.Err() != nil:
			return err
		case timedOut(err):
			attempts++
		case noPeers(err) && time.Now().Before(deadline):
			select {
			case <-time.After(placementPause):
			case <-ctx.Done():
				return err
			}
		default:
			return err
		}
	}
	return err
}

// noPeers reports whether err is the server's "no suitable peers for placement".
func noPeers(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == codeNoPeers
}

// KeeperSubject holds one message of REINS_TASKS that no worker consumes ("reins-" names are
// reserved for reins), so that the block the work-queue stream writes into is never left
// empty. When an acknowledgement empties that block, the file store replaces it with a new
// file under the stream's lock, and the next task's publish waits for it: with a single agent
// loop that wait was most of an iteration (BENCHMARKS.md, the keeper message). EnsureLayout
// publishes the first keeper message; the engine renews it as the stream moves on to new
// blocks (Keeper).
const KeeperSubject = TaskSubjectPrefix + KeeperHandler

// KeeperHandler is the handler name of KeeperSubject, which no handler may take.
const KeeperHandler = "reins-keep"

const keeperText = "keeps the task stream's last block from ever being empty"

// ensureKeeper publishes the keeper message unless the stream has one. Two processes starting
// at once may both publish one; that is harmless.
func ensureKeeper(ctx context.Context, js jetstream.JetStream, n Names) error {
	s, err := js.Stream(ctx, n.TasksStream())
	if err != nil {
		return fmt.Errorf("natsbox: stream %s: %w", n.TasksStream(), err)
	}
	_, err = s.GetLastMsgForSubject(ctx, n.KeeperSubject())
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		return fmt.Errorf("natsbox: stream %s: read the keeper message: %w", n.TasksStream(), err)
	}
	if _, err := js.Publish(ctx, n.KeeperSubject(), []byte(keeperText)); err != nil {
		return fmt.Errorf("natsbox: stream %s: publish the keeper message: %w", n.TasksStream(), err)
	}
	return nil
}

func (l Layout) check() error {
	switch {
	case l.Replicas < 0:
		return fmt.Errorf("natsbox: layout: Replicas is %d: want 0 (meaning 1) or more", l.Replicas)
	case l.MaxMsgSize < 0:
		return fmt.Errorf("natsbox: layout: MaxMsgSize is %d: want 0 (the server's max payload) or more", l.MaxMsgSize)
	case l.Duplicates < 0:
		return fmt.Errorf("natsbox: layout: Duplicates is %s: want 0 (meaning %s) or more", l.Duplicates, DefaultDuplicates)
	case l.DLQMaxAge < 0:
		return fmt.Errorf("natsbox: layout: DLQMaxAge is %s: want 0 (meaning %s) or more", l.DLQMaxAge, DefaultDLQMaxAge)
	case l.EffectsMaxAge < 0:
		return fmt.Errorf("natsbox: layout: EffectsMaxAge is %s: want 0 (meaning %s) or more", l.EffectsMaxAge, DefaultEffectsMaxAge)
	}
	if l.withDefaults().Duplicates > l.withDefaults().DLQMaxAge {
		return fmt.Errorf("natsbox: layout: Duplicates (%s) is longer than DLQMaxAge (%s)", l.withDefaults().Duplicates, l.withDefaults().DLQMaxAge)
	}
	return nil
}

func (l Layout) withDefaults() Layout {
	if l.Duplicates == 0 {
		l.Duplicates = DefaultDuplicates
	}
	if l.DLQMaxAge == 0 {
		l.DLQMaxAge = DefaultDLQMaxAge
	}
	if l.EffectsMaxAge == 0 {
		l.EffectsMaxAge = DefaultEffectsMaxAge
	}
	return l
}

func metadata() map[string]string { return map[string]string{MetadataKey: LayoutVersion} }

// streams returns the stream configurations of l, with maxMsg as the message size bound; their
// replicas are decided against what exists (replicaReport).
func (l Layout) streams(maxMsg int32) []jetstream.StreamConfig {
	l = l.withDefaults()
	return []jetstream.StreamConfig{{
		Name:        l.Names.TasksStream(),
		Description: "reins tasks: one message per unit of work, removed when a worker acks it",
		Subjects:    []string{l.Names.TaskSubjects()},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  l.Duplicates,
		MaxMsgSize:  maxMsg,
		Metadata:    metadata(),
	}, {
		Name:        l.Names.EventsStream(),
		Description: "reins run events",
		Subjects:    []string{l.Names.EventSubjects()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  l.Duplicates,
		MaxMsgSize:  maxMsg,
		Metadata:    metadata(),
	}, {
		Name:        l.Names.DLQStream(),
		Description: "reins dead tasks: attempts exhausted",
		Subjects:    []string{l.Names.DLQSubjects()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  l.Duplicates,
		MaxAge:      l.DLQMaxAge,
		MaxMsgSize:  maxMsg,
		Metadata:    metadata(),
	}}
}

// buckets returns the KV bucket configurations of l.
func (l Layout) buckets() []jetstream.KeyValueConfig {
	l = l.withDefaults()
	return []jetstream.KeyValueConfig{{
		Bucket:      l.Names.RunsBucket(),
		Description: "reins run state, written with compare-and-set on the revision",
		History:     1,
		Storage:     jetstream.FileStorage,
		Metadata:    metadata(),
	}, {
		Bucket:      l.Names.StatusBucket(),
		Description: "reins run ids by status",
		History:     1,
		Storage:     jetstream.FileStorage,
		Metadata:    metadata(),
	}, {
		Bucket:      l.Names.ServedBucket(),
		Description: "reins: what the running workers serve",
		History:     1,
		TTL:         ServedTTL,
		Storage:     jetstream.FileStorage,
		Metadata:    metadata(),
	}, {
		Bucket:      l.Names.CheckpointsBucket(),
		Description: "reins worker checkpoints",
		History:     1,
		Storage:     jetstream.FileStorage,
		Metadata:    metadata(),
	}, {
		Bucket:      l.Names.WorkflowsBucket(),
		Description: "reins workflow definitions by hash",
		History:     1,
		Storage:     jetstream.FileStorage,
		Metadata:    metadata(),
	}, {
		Bucket:      l.Names.EnginesBucket(),
		Description: "reins: the engines running and the partitions each consumes",
		History:     1,
		Storage:     jetstream.FileStorage,
		Metadata:    metadata(),
	}, {
		Bucket:      l.Names.RegistryBucket(),
		Description: "reins workflows registered by name, in versions",
		History:     1,
		Storage:     jetstream.FileStorage,
		Metadata:    metadata(),
	}, {
		Bucket:      l.Names.TriggersBucket(),
		Description: "reins: the state of the schedule triggers of registered workflows",
		History:     1,
		Storage:     jetstream.FileStorage,
		Metadata:    metadata(),
	}, {
		Bucket:      l.Names.ConcurrencyBucket(),
		Description: "reins concurrency keys: the runs holding their slots and the runs queued",
		History:     1,
		Storage:     jetstream.FileStorage,
		Metadata:    metadata(),
	}, {
		Bucket:      l.Names.LimitsBucket(),
		Description: "reins shared rate limits of model providers, written with compare-and-set on the revision",
		History:     1,
		TTL:         LimitsMaxAge,
		Storage:     jetstream.FileStorage,
		Metadata:    metadata(),
	}, {
		Bucket:      l.Names.EffectsBucket(),
		Description: "reins recorded results of side-effecting tool calls",
		History:     1,
		TTL:         l.EffectsMaxAge,
		Storage:     jetstream.FileStorage,
		Metadata:    metadata(),
	}, {
		Bucket:      l.Names.SessionsBucket(),
		Description: "reins conversations of agent steps with a session, across runs",
		History:     1,
		TTL:         SessionsMaxAge,
		Storage:     jetstream.FileStorage,
		Metadata:    metadata(),
	}}
}

// objectStore returns the configuration of ValuesBucket.
func (l Layout) objectStore() jetstream.ObjectStoreConfig {
	l = l.withDefaults()
	return jetstream.ObjectStoreConfig{
		Bucket:      l.Names.ValuesBucket(),
		Description: "reins values too large to travel inline, by run and digest",
		Storage:     jetstream.FileStorage,
		Metadata:    metadata(),
	}
}

// ensureObjectStore creates the object store want, or updates it when its storage, replicas,
// description or marker differ.
func ensureObjectStore(ctx context.Context, js jetstream.JetStream, want jetstream.ObjectStoreConfig, r *replicaReport) error {
	obs, err := js.ObjectStore(ctx, want.Bucket)
	switch {
	case err == nil:
		st, err := obs.Status(ctx)
		if err != nil {
			return fmt.Errorf("natsbox: object store %s: %w", want.Bucket, err)
		}
		have := st.Replicas()
		want.Replicas = r.replicas("object store "+want.Bucket, have)
		if st.Storage() == want.Storage && have == want.Replicas && st.Description() == want.Description &&
			st.Metadata()[MetadataKey] == want.Metadata[MetadataKey] {
			return leaderReads(ctx, js, "OBJ_"+want.Bucket)
		}
	case errors.Is(err, jetstream.ErrBucketNotFound):
		want.Replicas = r.replicas(want.Bucket, 0)
	default:
		return fmt.Errorf("natsbox: object store %s: %w", want.Bucket, err)
	}
	_, err = js.CreateOrUpdateObjectStore(ctx, want)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		_, err = js.CreateOrUpdateObjectStore(ctx, want) // created meanwhile by another process
	}
	if err != nil {
		err = replicaErr("object store "+want.Bucket, want.Replicas, err)
		return fmt.Errorf("natsbox: object store %s cannot be created or updated to the reins layout (%s storage, %d replicas): %w", want.Bucket, want.Storage, want.Replicas, err)
	}
	return leaderReads(ctx, js, "OBJ_"+want.Bucket)
}

func describe(cfg jetstream.StreamConfig) string {
	return fmt.Sprintf("subjects %s, %s retention, %s storage", strings.Join(cfg.Subjects, " "), cfg.Retention, cfg.Storage)
}

// ensureStream creates the stream want, or brings an existing one to it. Only the fields the
// layout owns (subjects, retention, storage, replicas, duplicate window, max age, max message
// size, description, the MetadataKey marker) are changed; other settings an operator made (max
// bytes, compression, placement, other metadata...) are kept. A stream that already matches is
// not touched, so that an account without the right to update streams can still start.
func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, r *replicaReport) error {
	for attempt := 0; ; attempt++ {
		s, err := js.Stream(ctx, want.Name)
		switch {
		case err == nil:
			have := s.CachedInfo().Config
			if have.Metadata[MetadataKey] == "" && !slices.Equal(have.Subjects, want.Subjects) {
				return fmt.Errorf("natsbox: stream %s exists with subjects %v and was not created by reins: refusing to change it (remove or rename it, or use another server)", want.Name, have.Subjects)
			}
			want := want
			want.Replicas = r.replicas("stream "+want.Name, have.Replicas)
			merged := overlay(have, want)
			if ownedEqual(have, merged) {
				return nil
			}
			if _, err := js.UpdateStream(ctx, merged); err != nil {
				err = replicaErr("stream "+want.Name, want.Replicas, err)
				return fmt.Errorf("natsbox: stream %s cannot be updated to the reins layout (%s): %w", want.Name, describe(want), err)
			}
			return nil
		case errors.Is(err, jetstream.ErrStreamNotFound):
			want := want
			want.Replicas = r.replicas(want.Name, 0)
			_, err := js.CreateStream(ctx, want)
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) && attempt == 0 {
				continue // another process created it meanwhile, with another config: update it
			}
			if err != nil {
				err = replicaErr("stream "+want.Name, want.Replicas, err)
				return fmt.Errorf("natsbox: stream %s cannot be created (%s): %w", want.Name, describe(want), err)
			}
			return nil
		default:
			return fmt.Errorf("natsbox: stream %s: %w", want.Name, err)
		}
	}
}

// overlay returns have with the fields the layout owns taken from want.
func overlay(have, want jetstream.StreamConfig) jetstream.StreamConfig {
	have.Description = want.Description
	have.Subjects = want.Subjects
	have.Retention = want.Retention
	have.Storage = want.Storage
	have.Replicas = want.Replicas
	have.Duplicates = want.Duplicates
	have.MaxAge = want.MaxAge
	have.MaxMsgSize = want.MaxMsgSize
	md := maps.Clone(have.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	maps.Copy(md, want.Metadata)
	have.Metadata = md
	return have
}

// ownedEqual reports whether a and b agree on the fields the layout owns.
func ownedEqual(a, b jetstream.StreamConfig) bool {
	return a.Description == b.Description && slices.Equal(a.Subjects, b.Subjects) &&
		a.Retention == b.Retention && a.Storage == b.Storage && a.Replicas == b.Replicas &&
		a.Duplicates == b.Duplicates && a.MaxAge == b.MaxAge && a.MaxMsgSize == b.MaxMsgSize &&
		a.Metadata[MetadataKey] == b.Metadata[MetadataKey]
}

// ensureBucket creates the bucket want, or updates it when its history, storage, replicas, max
// age or marker differ (a KV update rewrites the whole bucket configuration). A bucket that already
// matches is not touched.
func ensureBucket(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig, r *replicaReport) error {
	kv, err := js.KeyValue(ctx, want.Bucket)
	switch {
	case err == nil:
		st, err := kv.Status(ctx)
		if err != nil {
			return fmt.Errorf("natsbox: KV bucket %s: %w", want.Bucket, err)
		}
		have := st.Config()
		want.Replicas = r.replicas("KV bucket "+want.Bucket, have.Replicas)
		if have.History == want.History && have.Storage == want.Storage && have.Replicas == want.Replicas &&
			have.TTL == want.TTL && have.Description == want.Description && have.Metadata[MetadataKey] == want.Metadata[MetadataKey] {
			return leaderReads(ctx, js, "KV_"+want.Bucket)
		}
	case errors.Is(err, jetstream.ErrBucketNotFound):
		want.Replicas = r.replicas(want.Bucket, 0)
	default:
		return fmt.Errorf("natsbox: KV bucket %s: %w", want.Bucket, err)
	}
	_, err = js.CreateOrUpdateKeyValue(ctx, want)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		_, err = js.CreateOrUpdateKeyValue(ctx, want) // created meanwhile by another process
	}
	if err != nil {
		err = replicaErr("KV bucket "+want.Bucket, want.Replicas, err)
		return fmt.Errorf("natsbox: KV bucket %s cannot be created or updated to the reins layout (history %d, %s storage, %d replicas): %w", want.Bucket, want.History, want.Storage, want.Replicas, err)
	}
	return leaderReads(ctx, js, "KV_"+want.Bucket) // an update turns direct gets on again
}

// leaderReads turns direct gets off on stream name when it has more than one replica. A direct
// get may be answered by any replica, and a follower answers while it is behind its leader:
// always by the last writes in flight, and by much more once a node that died comes back and
// catches up (it answers from 90% in sync). reins reads back what it wrote: a run's record
// before deciding its next event (a stale one has the event judged stale and dropped), an
// engine's heartbeat before taking its partitions, an effect's claim, a checkpoint. Gets then
// go to the leader. With one replica, the replica is the leader, and direct gets stay.
func leaderReads(ctx context.Context, js jetstream.JetStream, name string) error {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("natsbox: stream %s: %w", name, err)
	}
	cfg := s.CachedInfo().Config
	if cfg.Replicas <= 1 || !cfg.AllowDirect {
		return nil
	}
	cfg.AllowDirect = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("natsbox: stream %s has %d replicas and answers reads from any of them; turning that off (allow_direct false): %w", name, cfg.Replicas, err)
	}
	return nil
}
