package natsbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// failsafe bounds every wait of these tests so that a broken build fails instead of hanging. It
// is never a timing assertion: nothing is expected to take more than a fraction of it.
const failsafe = 30 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), failsafe)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, opts Options) *Box {
	t.Helper()
	b, err := Open(testCtx(t), opts)
	if err != nil {
		t.Fatalf("Open(%+v): %v", opts, err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

func ensure(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	if err := EnsureLayout(testCtx(t), js, Layout{}); err != nil {
		t.Fatalf("EnsureLayout: %v", err)
	}
}

func taskSubject(t *testing.T, handler string) string {
	t.Helper()
	s, err := TaskSubject(handler)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func streamInfo(t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	ctx := testCtx(t)
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s info: %v", name, err)
	}
	return info
}

// tasks returns the number of messages in REINS_TASKS besides the keeper message(s) on
// KeeperSubject: the tasks.
func tasks(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	n := streamInfo(t, js, TasksStream).State.Msgs
	k := keepers(t, js)
	if k > n {
		t.Fatalf("TASKS has %d messages, fewer than its %d keeper messages", n, k)
	}
	return n - k
}

// keepers returns the number of messages on KeeperSubject in REINS_TASKS.
func keepers(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx := testCtx(t)
	s, err := js.Stream(ctx, TasksStream)
	if err != nil {
		t.Fatalf("stream %s: %v", TasksStream, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(KeeperSubject))
	if err != nil {
		t.Fatalf("stream %s info: %v", TasksStream, err)
	}
	return info.State.Subjects[KeeperSubject]
}

// roundTrip publishes one task and fetches it back with a pull consumer.
func roundTrip(t *testing.T, js jetstream.JetStream, handler, payload string) {
	t.Helper()
	ctx := testCtx(t)
	if _, err := js.Publish(ctx, taskSubject(t, handler), []byte(payload)); err != nil {
		t.Fatalf("publish: %v", err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, TasksStream, jetstream.ConsumerConfig{
		Durable: "test-" + handler, FilterSubject: taskSubject(t, handler), AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(failsafe))
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	if string(msg.Data()) != payload {
		t.Errorf("fetched %q, want %q", msg.Data(), payload)
	}
	if err := msg.DoubleAck(ctx); err != nil {
		t.Fatalf("ack: %v", err)
	}
}

func TestOpenInProcess(t *testing.T) {
	dir := t.TempDir()
	b := open(t, Options{DataDir: dir})
	if !b.Embedded() {
		t.Error("Embedded() = false for an embedded server")
	}
	if got := b.ClientURL(); got != "" {
		t.Errorf("ClientURL() = %q, want \"\" in-process", got)
	}
	if got := b.MaxPayload(); got != 1<<20 {
		t.Errorf("MaxPayload() = %d, want 1 MiB", got)
	}
	fi, err := os.Stat(filepath.Join(dir, "jetstream"))
	if err != nil {
		t.Fatalf("file store: %v", err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o700 {
		t.Errorf("DataDir/jetstream has mode %v, want 0700", fi.Mode().Perm())
	}
	ensure(t, b.JetStream())
	roundTrip(t, b.JetStream(), "echo", "hello")
	// The work queue removed the acked task.
	if n := tasks(t, b.JetStream()); n != 0 {
		t.Errorf("TASKS has %d tasks after the ack, want 0 (work queue)", n)
	}
}

func TestOpenLoopback(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Authenticate: testAuth})
	u, err := url.Parse(b.ClientURL())
	if err != nil || u.Scheme != "nats" || u.Hostname() != "127.0.0.1" || u.Port() == "" || u.Port() == "0" {
		t.Fatalf("ClientURL() = %q (%v), want nats://127.0.0.1:PORT", b.ClientURL(), err)
	}
	ensure(t, b.JetStream())
	// Another client (another process, in real life) reaches it on the URL.
	nc, err := nats.Connect(b.ClientURL(), nats.Token(testToken))
	if err != nil {
		t.Fatalf("connect to ClientURL: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, js, "echo", "over tcp")
}

func TestOpenLocalhost(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir(), Listen: "localhost:0"})
	if !strings.HasPrefix(b.ClientURL(), "nats://127.0.0.1:") {
		t.Errorf("ClientURL() = %q, want nats://127.0.0.1:PORT", b.ClientURL())
	}
}

func TestListenRefused(t *testing.T) {
	for _, listen := range []string{
		"0.0.0.0:4222", ":4222", ":0", "[::]:0", "192.168.1.10:0", "10.0.0.1:4222",
		"example.com:0", "127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000",
	} {
		t.Run(listen, func(t *testing.T) {
			dir := t.TempDir()
			b, err := Open(testCtx(t), Options{DataDir: dir, Listen: listen})
			if err == nil {
				b.Close()
				t.Fatalf("Open with Listen %q succeeded, want an error", listen)
			}
			if !strings.Contains(err.Error(), listen) {
				t.Errorf("error %q does not name %q", err, listen)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("a refused Listen left files in DataDir: %v", entries)
			}
		})
	}
}

func TestOptionsRefused(t *testing.T) {
	for name, opts := range map[string]Options{
		"no data dir":             {},
		"creds without URL":       {DataDir: "x", CredsFile: "user.creds"},
		"TLS without URL":         {DataDir: "x", TLSCA: "ca.pem"},
		"data dir with URL":       {URL: "nats://127.0.0.1:1", DataDir: "x"},
		"listen with URL":         {URL: "nats://127.0.0.1:1", Listen: "127.0.0.1:0"},
		"creds and nkey":          {URL: "nats://127.0.0.1:1", CredsFile: "a", NKeyFile: "b"},
		"cert without key":        {URL: "nats://127.0.0.1:1", TLSCert: "cert.pem"},
		"missing nkey seed file":  {URL: "nats://127.0.0.1:1", NKeyFile: filepath.Join(t.TempDir(), "none.nk")},
		"listen on every address": {DataDir: "x", Listen: "0.0.0.0:0"},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := Open(testCtx(t), opts)
			if err == nil {
				b.Close()
				t.Fatalf("Open(%+v) succeeded, want an error", opts)
			}
			if !strings.HasPrefix(err.Error(), "natsbox: ") {
				t.Errorf("error %q lacks the natsbox prefix", err)
			}
		})
	}
}

func TestDataDirLocked(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no data directory lock on windows")
	}
	dir := t.TempDir()
	open(t, Options{DataDir: dir})
	b, err := Open(testCtx(t), Options{DataDir: dir, Listen: "127.0.0.1:0"})
	if err == nil {
		b.Close()
		t.Fatal("a second embedded server on the same DataDir started")
	}
	if !errors.Is(err, ErrDataDirLocked) {
		t.Errorf("error = %v, want ErrDataDirLocked", err)
	}
}

func TestCloseIdempotent(t *testing.T) {
	b, err := Open(testCtx(t), Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := b.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	if !b.Conn().IsClosed() {
		t.Error("the connection is not closed after Close")
	}
}

func TestDuplicateWindow(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir()})
	js := b.JetStream()
	ensure(t, js)
	ctx := testCtx(t)
	subj := taskSubject(t, "charge")
	first, err := js.Publish(ctx, subj, []byte("run-1/step-2/attempt-1"), jetstream.WithMsgID("run-1/step-2/1"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := js.Publish(ctx, subj, []byte("run-1/step-2/attempt-1"), jetstream.WithMsgID("run-1/step-2/1"))
	if err != nil {
		t.Fatal(err)
	}
	if first.Duplicate || !again.Duplicate || again.Sequence != first.Sequence {
		t.Errorf("acks %+v then %+v: want the second one a duplicate of the first", first, again)
	}
	if n := tasks(t, js); n != 1 {
		t.Errorf("TASKS has %d tasks after publishing one id twice, want 1", n)
	}
	if _, err := js.Publish(ctx, subj, []byte("other"), jetstream.WithMsgID("run-1/step-3/1")); err != nil {
		t.Fatal(err)
	}
	if n := tasks(t, js); n != 2 {
		t.Errorf("TASKS has %d tasks after a second id, want 2", n)
	}
}

func TestEnsureLayoutConfigs(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir()})
	js := b.JetStream()
	ensure(t, js)
	ensure(t, js) // idempotent

	want := map[string]struct {
		subject   string
		retention jetstream.RetentionPolicy
		maxAge    time.Duration
	}{
		TasksStream:  {TaskSubjects, jetstream.WorkQueuePolicy, 0},
		EventsStream: {EventSubjects, jetstream.LimitsPolicy, 0},
		DLQStream:    {DLQSubjects, jetstream.LimitsPolicy, 30 * 24 * time.Hour},
	}
	for name, w := range want {
		cfg := streamInfo(t, js, name).Config
		if !slices.Equal(cfg.Subjects, []string{w.subject}) {
			t.Errorf("%s subjects = %v, want [%s]", name, cfg.Subjects, w.subject)
		}
		if cfg.Retention != w.retention {
			t.Errorf("%s retention = %v, want %v", name, cfg.Retention, w.retention)
		}
		if cfg.Storage != jetstream.FileStorage {
			t.Errorf("%s storage = %v, want file", name, cfg.Storage)
		}
		if cfg.Duplicates != 2*time.Minute {
			t.Errorf("%s duplicate window = %s, want 2m", name, cfg.Duplicates)
		}
		if cfg.MaxAge != w.maxAge {
			t.Errorf("%s max age = %s, want %s", name, cfg.MaxAge, w.maxAge)
		}
		if cfg.MaxMsgSize != 1<<20 {
			t.Errorf("%s max msg size = %d, want the max payload (1 MiB)", name, cfg.MaxMsgSize)
		}
		if cfg.Replicas != 1 {
			t.Errorf("%s replicas = %d, want 1", name, cfg.Replicas)
		}
		if cfg.Metadata[MetadataKey] != LayoutVersion {
			t.Errorf("%s metadata = %v, want %s=%s", name, cfg.Metadata, MetadataKey, LayoutVersion)
		}
	}
	for _, bucket := range []string{RunsBucket, CheckpointsBucket, WorkflowsBucket, EffectsBucket, RegistryBucket, ConcurrencyBucket, SessionsBucket, LimitsBucket} {
		kv, err := js.KeyValue(testCtx(t), bucket)
		if err != nil {
			t.Fatalf("bucket %s: %v", bucket, err)
		}
		st, err := kv.Status(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if st.History() != 1 {
			t.Errorf("%s history = %d, want 1", bucket, st.History())
		}
		if st.Config().Storage != jetstream.FileStorage {
			t.Errorf("%s storage = %v, want file", bucket, st.Config().Storage)
		}
		if st.Metadata()[MetadataKey] != LayoutVersion {
			t.Errorf("%s metadata = %v, want %s=%s", bucket, st.Metadata(), MetadataKey, LayoutVersion)
		}
		wantTTL := time.Duration(0) // runs, checkpoints and workflows live until pruned
		switch bucket {
		case EffectsBucket:
			wantTTL = DefaultEffectsMaxAge
		case LimitsBucket:
			wantTTL = LimitsMaxAge // a scope unused for an hour is a fresh one's
		}
		if bucket == SessionsBucket {
			wantTTL = SessionsMaxAge
		}
		if st.TTL() != wantTTL {
			t.Errorf("%s max age = %s, want %s", bucket, st.TTL(), wantTTL)
		}
	}
}

func TestEnsureLayoutConcurrent(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir()})
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = EnsureLayout(ctx, b.JetStream(), Layout{}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("EnsureLayout #%d: %v", i, err)
		}
	}
}

// EnsureLayout keeps one message on KeeperSubject in REINS_TASKS: it publishes it once, does
// not add another when it runs again (in this process or after a restart), and the message
// outlives the tasks a worker takes and acknowledges, and a restart.
func TestKeeper(t *testing.T) {
	dir := t.TempDir()
	first, err := Open(testCtx(t), Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	js := first.JetStream()
	if n := keeperSubjectIsATask(t); n != KeeperSubject {
		t.Fatalf("TaskSubject(reins-keep) = %q, want %q", n, KeeperSubject)
	}
	ensure(t, js)
	if n := keepers(t, js); n != 1 {
		t.Fatalf("%d keeper messages after EnsureLayout, want 1", n)
	}
	if n := streamInfo(t, js, TasksStream).State.Msgs; n != 1 {
		t.Fatalf("TASKS has %d messages after EnsureLayout, want the keeper alone", n)
	}
	ensure(t, js)
	if n := keepers(t, js); n != 1 {
		t.Fatalf("%d keeper messages after EnsureLayout ran twice, want 1", n)
	}
	// A worker takes and acknowledges a task: the work queue removes it and keeps the keeper.
	roundTrip(t, js, "echo", "hello")
	if n, k := tasks(t, js), keepers(t, js); n != 0 || k != 1 {
		t.Fatalf("TASKS has %d tasks and %d keeper messages after the ack, want 0 and 1", n, k)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	second := open(t, Options{DataDir: dir})
	js = second.JetStream()
	if n := keepers(t, js); n != 1 {
		t.Fatalf("%d keeper messages after the restart, want 1", n)
	}
	ensure(t, js)
	if n := keepers(t, js); n != 1 {
		t.Fatalf("%d keeper messages after EnsureLayout on the restarted server, want 1", n)
	}
	if n := streamInfo(t, js, TasksStream).State.Msgs; n != 1 {
		t.Errorf("TASKS has %d messages after the restart, want the keeper alone", n)
	}
}

// keeperSubjectIsATask returns the task subject of the keeper's handler name: the keeper is
// in REINS_TASKS under a name reserved for reins.
func keeperSubjectIsATask(t *testing.T) string {
	t.Helper()
	return taskSubject(t, strings.TrimPrefix(KeeperSubject, "reins.task."))
}

func TestEnsureLayoutUpdatesCompatible(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir()})
	js := b.JetStream()
	ctx := testCtx(t)
	// An EVENTS stream from an earlier layout: same subjects, a shorter duplicate window, and a
	// size limit an operator set.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: EventsStream, Subjects: []string{EventSubjects}, Storage: jetstream.FileStorage,
		Duplicates: 10 * time.Second, MaxBytes: 64 << 20,
	}); err != nil {
		t.Fatal(err)
	}
	// A runs bucket that kept 5 revisions, and an effects bucket from before records expired.
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: RunsBucket, History: 5, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: EffectsBucket, History: 1, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	ensure(t, js)
	fx, err := js.KeyValue(ctx, EffectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := fx.Status(ctx); err != nil {
		t.Fatal(err)
	} else if st.TTL() != DefaultEffectsMaxAge {
		t.Errorf("%s after EnsureLayout: max age %s, want %s", EffectsBucket, st.TTL(), DefaultEffectsMaxAge)
	}
	cfg := streamInfo(t, js, EventsStream).Config
	if cfg.Duplicates != DefaultDuplicates || cfg.Metadata[MetadataKey] != LayoutVersion {
		t.Errorf("EVENTS after EnsureLayout: duplicates %s, metadata %v; want it updated to the layout", cfg.Duplicates, cfg.Metadata)
	}
	if cfg.MaxBytes != 64<<20 {
		t.Errorf("EVENTS max bytes = %d after EnsureLayout, want the operator's 64 MiB kept", cfg.MaxBytes)
	}
	kv, err := js.KeyValue(ctx, RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.History() != 1 {
		t.Errorf("%s history = %d after EnsureLayout, want 1", RunsBucket, st.History())
	}
}

func TestEnsureLayoutIncompatible(t *testing.T) {
	for name, tc := range map[string]struct {
		existing jetstream.StreamConfig
		want     string
	}{
		"retention cannot change": {
			jetstream.StreamConfig{Name: TasksStream, Subjects: []string{TaskSubjects}, Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage},
			"stream REINS_TASKS cannot be updated to the reins layout",
		},
		"storage cannot change": {
			jetstream.StreamConfig{Name: DLQStream, Subjects: []string{DLQSubjects}, Storage: jetstream.MemoryStorage},
			"stream REINS_DLQ cannot be updated to the reins layout",
		},
		"someone else's stream": {
			jetstream.StreamConfig{Name: TasksStream, Subjects: []string{"orders.>"}, Storage: jetstream.FileStorage},
			"stream REINS_TASKS exists with subjects [orders.>] and was not created by reins",
		},
	} {
		t.Run(name, func(t *testing.T) {
			b := open(t, Options{DataDir: t.TempDir()})
			js := b.JetStream()
			if _, err := js.CreateStream(testCtx(t), tc.existing); err != nil {
				t.Fatal(err)
			}
			err := EnsureLayout(testCtx(t), js, Layout{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("EnsureLayout error = %v, want one containing %q", err, tc.want)
			}
			// The existing stream is left as it was.
			cfg := streamInfo(t, js, tc.existing.Name).Config
			if !slices.Equal(cfg.Subjects, tc.existing.Subjects) || cfg.Retention != tc.existing.Retention || cfg.Storage != tc.existing.Storage {
				t.Errorf("the existing stream changed: %+v", cfg)
			}
		})
	}
}

func TestLayoutRefused(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir()})
	for _, l := range []Layout{
		{Replicas: -1}, {MaxMsgSize: -1}, {Duplicates: -time.Second}, {DLQMaxAge: -time.Second}, {EffectsMaxAge: -time.Second},
		{Duplicates: time.Hour, DLQMaxAge: time.Minute},
	} {
		if err := EnsureLayout(testCtx(t), b.JetStream(), l); err == nil {
			t.Errorf("EnsureLayout(%+v) succeeded, want an error", l)
		}
	}
}

// runsBucket opens an embedded server with the layout and returns it with the runs bucket.
func runsBucket(t *testing.T) (*Box, jetstream.KeyValue) {
	t.Helper()
	b := open(t, Options{DataDir: t.TempDir()})
	ensure(t, b.JetStream())
	kv, err := b.JetStream().KeyValue(testCtx(t), RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	return b, kv
}

func TestKVCompareAndSet(t *testing.T) {
	_, kv := runsBucket(t)
	ctx := testCtx(t)
	rev1, err := kv.Create(ctx, "run-1", []byte(`{"iteration":0}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "run-1", []byte(`{"iteration":0}`)); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Errorf("second Create = %v, want ErrKeyExists", err)
	}
	rev2, err := kv.Update(ctx, "run-1", []byte(`{"iteration":1}`), rev1)
	if err != nil {
		t.Fatalf("Update at the current revision: %v", err)
	}
	// A writer still holding rev1 loses.
	if _, err := kv.Update(ctx, "run-1", []byte(`{"iteration":1,"stale":true}`), rev1); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		t.Fatalf("Update at a stale revision = %v, want ErrKeyRevisionMismatch", err)
	}
	e, err := kv.Get(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if e.Revision() != rev2 || string(e.Value()) != `{"iteration":1}` {
		t.Errorf("run-1 = %s at revision %d, want the rev %d value", e.Value(), e.Revision(), rev2)
	}
}

func TestRestartPersistence(t *testing.T) {
	dir := t.TempDir()
	ctx := testCtx(t)
	first, err := Open(ctx, Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ensure(t, first.JetStream())
	if _, err := first.JetStream().Publish(ctx, taskSubject(t, "charge"), []byte("task-1"), jetstream.WithMsgID("t1")); err != nil {
		t.Fatal(err)
	}
	kv, err := first.JetStream().KeyValue(ctx, RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(ctx, "run-1", []byte("state-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	second := open(t, Options{DataDir: dir})
	js := second.JetStream()
	ensure(t, js) // on existing streams: changes nothing
	if n := tasks(t, js); n != 1 {
		t.Fatalf("TASKS has %d tasks after the restart, want 1", n)
	}
	s, err := js.Stream(ctx, TasksStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, taskSubject(t, "charge"))
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "task-1" {
		t.Errorf("task after restart = %q, want task-1", m.Data)
	}
	kv, err = js.KeyValue(ctx, RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Value()) != "state-1" || e.Revision() != rev {
		t.Errorf("run-1 after restart = %q rev %d, want state-1 rev %d", e.Value(), e.Revision(), rev)
	}
}

func TestExternal(t *testing.T) {
	ext := open(t, Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Authenticate: testAuth}) // "the external server"
	b := open(t, Options{URL: ext.ClientURL(), Name: "reins-test", Token: testToken})
	if b.Embedded() {
		t.Error("Embedded() = true with URL set")
	}
	if b.ClientURL() != "" {
		t.Errorf("ClientURL() = %q, want \"\" for an external server", b.ClientURL())
	}
	if b.MaxPayload() != 1<<20 {
		t.Errorf("MaxPayload() = %d, want 1 MiB", b.MaxPayload())
	}
	ensure(t, b.JetStream())
	roundTrip(t, b.JetStream(), "remote", "via url")
	// The layout is on the external server.
	if _, err := ext.JetStream().KeyValue(testCtx(t), RunsBucket); err != nil {
		t.Errorf("bucket %s on the external server: %v", RunsBucket, err)
	}
}

func TestExternalDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	for _, tc := range []struct{ url, shown string }{
		{"nats://" + addr, "nats://" + addr},
		{"nats://alice:s3cret@" + addr, "nats://alice:xxxxx@" + addr},
		{"nats://" + addr + ",nats://tok3n@" + addr, "nats://" + addr + ",nats://xxxxx@" + addr},
	} {
		b, err := Open(testCtx(t), Options{URL: tc.url})
		if err == nil {
			b.Close()
			t.Fatalf("Open(%s) succeeded with nothing listening", tc.url)
		}
		if !strings.Contains(err.Error(), tc.shown) {
			t.Errorf("error %q does not name %s", err, tc.shown)
		}
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "tok3n") {
			t.Errorf("error %q shows a secret", err)
		}
	}
}

// runServer starts a real nats-server with opts, shut down when the test ends, and returns it
// once it takes connections.
func runServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(failsafe) {
		t.Fatal("nats-server not ready")
	}
	return ns
}

func TestExternalWithoutJetStream(t *testing.T) {
	// A real NATS server without JetStream: the connection works, the JetStream check does not.
	ns := runServer(t, &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true})
	b, err := Open(testCtx(t), Options{URL: ns.ClientURL()})
	if err == nil {
		b.Close()
		t.Fatal("Open on a server without JetStream succeeded")
	}
	if !strings.Contains(err.Error(), "JetStream is not available at "+ns.ClientURL()) {
		t.Errorf("error %q does not say JetStream is missing at %s", err, ns.ClientURL())
	}
}

// chanHandler is a slog handler that forwards record messages to a channel without blocking.
type chanHandler struct{ ch chan string }

func (h chanHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h chanHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.ch <- r.Message:
	default:
	}
	return nil
}
func (h chanHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h chanHandler) WithGroup(string) slog.Handler      { return h }

func waitLog(t *testing.T, ch <-chan string, want string) {
	t.Helper()
	timeout := time.NewTimer(failsafe)
	defer timeout.Stop()
	for {
		select {
		case msg := <-ch:
			if msg == want {
				return
			}
		case <-timeout.C:
			t.Fatalf("no %q logged within the failsafe %s", want, failsafe)
		}
	}
}

func TestReconnect(t *testing.T) {
	dir := t.TempDir()
	ext, err := Open(testCtx(t), Options{DataDir: dir, Listen: "127.0.0.1:0", Authenticate: testAuth})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(ext.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	logs := make(chan string, 1024)
	b := open(t, Options{URL: ext.ClientURL(), Token: testToken, Logger: slog.New(chanHandler{logs})})
	js := b.JetStream()
	ensure(t, js)
	ctx := testCtx(t)
	if _, err := js.Publish(ctx, taskSubject(t, "h"), []byte("before")); err != nil {
		t.Fatal(err)
	}

	if err := ext.Close(); err != nil { // the server goes away
		t.Fatal(err)
	}
	waitLog(t, logs, logDisconnected)
	open(t, Options{DataDir: dir, Listen: u.Host, Authenticate: testAuth}) // and comes back on the same port
	waitLog(t, logs, logReconnected)

	if _, err := js.Publish(ctx, taskSubject(t, "h"), []byte("after")); err != nil {
		t.Fatalf("publish after the reconnect: %v", err)
	}
	if n := tasks(t, js); n != 2 {
		t.Errorf("TASKS has %d tasks, want 2 (one from before the restart)", n)
	}
}

func TestEmbeddedPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	b, err := Open(testCtx(t), Options{DataDir: dir, Listen: l.Addr().String()})
	if err == nil {
		b.Close()
		t.Fatal("Open on a port in use succeeded")
	}
	if !strings.Contains(err.Error(), l.Addr().String()) {
		t.Errorf("error %q does not name %s", err, l.Addr())
	}
	// The failed start released the data directory.
	open(t, Options{DataDir: dir})
}

func TestToken(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ok   bool
		want string // part of the error
	}{
		{"charge", true, ""},
		{"run-01HZX3Q7", true, ""},
		{"orders_refund", true, ""},
		{"名前", true, ""},
		{"a/b=c", true, ""},
		{"", false, "empty"},
		{"orders.refund", false, "'.'"},
		{"orders*", false, "'*'"},
		{">", false, "'>'"},
		{"a b", false, "whitespace"},
		{"a\tb", false, "whitespace"},
		{"a\nb", false, "whitespace"},
		{"a\u00a0b", false, "whitespace"},
		{"a\x00b", false, "control"},
		{"a\x7fb", false, "control"},
		{"a\xffb", false, "UTF-8"},
		{strings.Repeat("x", MaxTokenLen), true, ""},
		{strings.Repeat("x", MaxTokenLen+1), false, "bytes long"},
	} {
		err := CheckToken(tc.in)
		if tc.ok {
			if err != nil {
				t.Errorf("CheckToken(%q) = %v, want nil", tc.in, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckToken(%q) = %v, want ErrBadToken mentioning %q", tc.in, err, tc.want)
		}
	}
}

// FuzzCheckToken holds checkToken's byte-at-a-time path (plainToken) to the rune-by-rune
// check: a token it takes, the runes' check takes too, and each token gets the same answer.
func FuzzCheckToken(f *testing.F) {
	for _, s := range []string{"charge", "run-01HZX3Q7", "名前", "a.b", "a b", "a\x7fb", "a\u0085b", "~", "!", strings.Repeat("x", MaxTokenLen+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if plainToken(s) && checkTokenRunes(s) != nil {
			t.Fatalf("plainToken takes %q, which the runes' check refuses: %v", s, checkTokenRunes(s))
		}
		if (checkToken(s) == nil) != (checkTokenRunes(s) == nil) {
			t.Fatalf("checkToken(%q) = %v, the runes' check %v", s, checkToken(s), checkTokenRunes(s))
		}
	})
}

// BenchmarkCheckToken checks a run id as every event's subject does, a byte at a time
// (checkToken) and rune by rune (checkTokenRunes, what it did before).
func BenchmarkCheckToken(b *testing.B) {
	const id = "run-01JQ8Z3K5V7W9X2Y4A6B8C0D1E"
	for _, bc := range []struct {
		name  string
		check func(string) error
	}{{"bytes", checkToken}, {"runes", checkTokenRunes}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if err := bc.check(id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestSubjects(t *testing.T) {
	for _, tc := range []struct {
		f     func(string) (string, error)
		in    string
		want  string
		label string
	}{
		{TaskSubject, "charge", "reins.task.charge", ""},
		{EventSubject, "run-1", "reins.event.12.run-1", ""},
		{DLQSubject, "charge", "reins.dlq.charge", ""},
		{TaskSubject, "payments.charge", "reins.task.payments.charge", ""},
		{TaskSubject, "a..b", "", "handler"},
		{TaskSubject, "a.", "", "handler"},
		{EventSubject, "run 1", "", "run id"},
		{DLQSubject, "*", "", "handler"},
	} {
		got, err := tc.f(tc.in)
		if tc.label == "" {
			if err != nil || got != tc.want {
				t.Errorf("subject of %q = %q, %v; want %q", tc.in, got, err, tc.want)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), tc.label) {
			t.Errorf("subject of %q: error %v, want ErrBadToken naming the %s", tc.in, err, tc.label)
		}
	}
	// Every built subject falls in its stream's filter.
	for subj, filter := range map[string]string{
		"reins.task.x": TaskSubjects, "reins.event.x": EventSubjects, "reins.dlq.x": DLQSubjects,
	} {
		if !strings.HasPrefix(subj, strings.TrimSuffix(filter, ">")) {
			t.Errorf("%s is not under %s", subj, filter)
		}
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                        "nats://127.0.0.1:4222",
		"nats://alice:pw@host:4222":                    "nats://alice:xxxxx@host:4222",
		"nats://token@host:4222":                       "nats://xxxxx@host:4222",
		"tls://a:b@h1:1, nats://h2:2":                  "tls://a:xxxxx@h1:1,nats://h2:2",
		"alice:pw@host:4222":                           "alice:xxxxx@host:4222",
		"nats://u:p@ss@host:4222":                      "nats://u:xxxxx@host:4222",
		"ws://host:80/path@x":                          "ws://host:80/path@x",
		"nats://h1:1,nats://bob:pw@h2:2,nats://t@h3:3": "nats://h1:1,nats://bob:xxxxx@h2:2,nats://xxxxx@h3:3",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// Connect opens a second connection to the same embedded server: it sees the same streams, and
// closing it leaves the server and the first connection running.
func TestConnect(t *testing.T) {
	ctx := testCtx(t)
	b, err := Open(ctx, Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ensure(t, b.JetStream())
	c, err := b.Connect(ctx, "second")
	if err != nil {
		t.Fatal(err)
	}
	if c.Embedded() {
		t.Error("the second connection claims to run the server")
	}
	if _, err := c.JetStream().Publish(ctx, "reins.task.h", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if n := tasks(t, b.JetStream()); n != 1 {
		t.Fatalf("the first connection sees %d tasks, want the one the second published", n)
	}
	// A connection made by Connect connects again (an engine given one opens its leases' own).
	cc, err := c.Connect(ctx, "third")
	if err != nil {
		t.Fatalf("Connect of a connected Box: %v", err)
	}
	if _, err := cc.JetStream().Publish(ctx, "reins.task.h", []byte("z")); err != nil {
		t.Fatal(err)
	}
	if n := tasks(t, b.JetStream()); n != 2 {
		t.Fatalf("the first connection sees %d tasks, want the 2 published", n)
	}
	for _, x := range []*Box{cc, c} {
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.JetStream().Publish(ctx, "reins.task.h", []byte("y")); err != nil {
		t.Fatalf("the first connection after the second closed: %v", err)
	}
}

// A layout step whose API request timed out is asked again, each try within layoutAttempt,
// up to layoutAttempts times when the caller set no deadline and until its deadline when it
// did; any other error, or a done context, ends it at once.
func TestRetryTimeouts(t *testing.T) {
	refused := errors.New("refused")
	offline := &jetstream.APIError{Code: 503, ErrorCode: codeNoPeers, Description: "no suitable peers for placement, peer offline"}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	far, cancelFar := context.WithTimeout(bg, time.Hour)
	defer cancelFar()
	timeouts := func(n int) []error {
		errs := make([]error, n)
		for i := range errs {
			errs[i] = nats.ErrTimeout
		}
		return errs
	}
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		grace time.Duration
		errs  []error // what the step returns, call by call (then nil)
		calls int
		want  error
	}{
		{"succeeds after two timeouts", bg, placementGrace, []error{context.DeadlineExceeded, nats.ErrTimeout}, 3, nil},
		{"times out every time", bg, placementGrace, timeouts(layoutAttempts + 1), layoutAttempts, nats.ErrTimeout},
		{"tried until the caller's deadline", far, placementGrace, timeouts(2 * layoutAttempts), 2*layoutAttempts + 1, nil},
		{"another error", bg, placementGrace, []error{refused}, 1, refused},
		{"context done", cancelled, placementGrace, []error{context.DeadlineExceeded}, 1, context.DeadlineExceeded},
		{"placed once the peers are online", bg, placementGrace, []error{offline, offline}, 3, nil},
		// The second try comes a pause later, past the grace of one pause: the error is the answer.
		{"no peers past the grace", bg, placementPause, []error{offline, offline, offline}, 2, offline},
		{"no peers, context done", cancelled, placementGrace, []error{offline}, 1, offline},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := retryTimeouts(tc.ctx, tc.grace, func(ctx context.Context) error {
				calls++
				// A lost answer must not be waited for past one attempt, whatever the caller's
				// deadline.
				if d, ok := ctx.Deadline(); !ok || time.Until(d) > layoutAttempt {
					t.Errorf("call %d: the attempt's deadline is %v (set: %v), beyond %s", calls, time.Until(d), ok, layoutAttempt)
				}
				if calls <= len(tc.errs) {
					return fmt.Errorf("step: %w", tc.errs[calls-1])
				}
				return nil
			})
			if calls != tc.calls || !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("%d calls, error %v; want %d calls and %v", calls, err, tc.calls, tc.want)
			}
		})
	}
}

// testToken is the token of an admin in the tests that connect to an embedded server as
// another process would.
const testToken = "test-admin-token"

func testAuth(token string) (Identity, bool) {
	if token == testToken {
		return Identity{Name: "admin", Roles: []string{RoleAdmin}}, true
	}
	return Identity{}, false
}

// MaxPayload is read once per connection to a server: after a reconnection, to a server that
// allows less, it is that server's.
func TestMaxPayloadFollowsTheServer(t *testing.T) {
	store := t.TempDir()
	start := func(port int, maxPayload int32) *server.Server {
		t.Helper()
		return runServer(t, &server.Options{Host: "127.0.0.1", Port: port, NoSigs: true, NoLog: true,
			JetStream: true, StoreDir: store, MaxPayload: maxPayload})
	}
	first := start(server.RANDOM_PORT, 0)
	logs := make(chan string, 1024)
	b := open(t, Options{URL: first.ClientURL(), Logger: slog.New(chanHandler{logs})})
	for range 2 { // the second from what was read
		if got := b.MaxPayload(); got != 1<<20 {
			t.Fatalf("MaxPayload() = %d on a server of the default, want 1 MiB", got)
		}
	}
	port := first.Addr().(*net.TCPAddr).Port
	first.Shutdown()
	first.WaitForShutdown()
	waitLog(t, logs, logDisconnected)
	start(port, 256<<10)
	waitLog(t, logs, logReconnected)
	if got := b.MaxPayload(); got != 256<<10 {
		t.Errorf("MaxPayload() = %d after reconnecting to a server of 256 KiB, want 256 KiB", got)
	}
}
