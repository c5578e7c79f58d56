package natsbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// principals of the permission tests: token → identity.
var testPrincipals = map[string]Identity{
	"tok-admin":     {Name: "root", Roles: []string{RoleAdmin}},
	"tok-submitter": {Name: "sam", Roles: []string{RoleSubmitter}},
	"tok-approver":  {Name: "alice", Roles: []string{RoleApprover}},
	"tok-viewer":    {Name: "val", Roles: []string{RoleViewer}},
	"tok-worker":    {Name: "wanda", Roles: []string{RoleWorker}},
	"tok-nothing":   {Name: "nobody", Roles: []string{"finance"}},
}

func principalAuth(token string) (Identity, bool) {
	id, ok := testPrincipals[token]
	return id, ok
}

// served opens an embedded server that knows testPrincipals, with the layout in place.
func served(t *testing.T) *Box {
	t.Helper()
	b := open(t, Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Authenticate: principalAuth})
	ensure(t, b.JetStream())
	return b
}

// TestAuthRefusesStrangers: no token, a wrong token, and a token in the user slot of a URL
// that the server does not know are refused with ErrAuth and a sentence saying what to do.
func TestAuthRefusesStrangers(t *testing.T) {
	b := served(t)
	if nc, err := nats.Connect(b.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("a connection without a token was accepted")
	}
	for _, opts := range []Options{{URL: b.ClientURL()}, {URL: b.ClientURL(), Token: "guess"}} {
		box, err := Open(testCtx(t), opts)
		if err == nil {
			box.Close()
			t.Fatalf("Open(%v) succeeded", opts)
		}
		if !errors.Is(err, ErrAuth) || strings.Contains(err.Error(), "guess") || strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("Open(%v) = %v; want one line wrapping ErrAuth that does not show the token", opts, err)
		}
	}
}

// canPublish reports whether the server lets the principal of token publish on subject: the
// server answers a forbidden publish with a permissions violation, which arrives before the
// answer to the flush that follows it.
func canPublish(t *testing.T, b *Box, token, subject string) bool {
	t.Helper()
	c := open(t, Options{URL: b.ClientURL(), Token: token})
	if err := c.Conn().Publish(subject, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	err := c.Conn().LastError()
	if err != nil && !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("publish on %s: %v", subject, err)
	}
	return err == nil
}

func TestPermissionsByRole(t *testing.T) {
	b := served(t)
	for _, tc := range []struct {
		token, subject string
		want           bool
	}{
		// Only engines and workers answer tasks; nobody else may forge a result.
		{"tok-submitter", "reins.event.11.r-1", false},
		{"tok-approver", "reins.event.11.r-1", false},
		{"tok-viewer", "reins.event.11.r-1", false},
		{"tok-nothing", "reins.event.11.r-1", false},
		{"tok-worker", "reins.event.11.r-1", true},
		{"tok-admin", "reins.event.11.r-1", true},
		// A person's events only under its own name, and only those its roles allow.
		{"tok-submitter", "reins.event.11.r-1.submit.sam", true},
		{"tok-submitter", "reins.event.11.r-1.submit.alice", false},
		{"tok-submitter", "reins.event.11.r-1.human.sam", false},
		{"tok-approver", "reins.event.11.r-1.human.alice", true},
		{"tok-approver", "reins.event.11.r-1.human.sam", false},
		{"tok-approver", "reins.event.11.r-1.submit.alice", false},
		{"tok-worker", "reins.event.11.r-1.human.wanda", false},
		{"tok-viewer", "reins.event.11.r-1.human.val", false},
		// Nobody but the engine (and the operator) writes run records or publishes tasks.
		{"tok-worker", "$KV." + RunsBucket + ".r-1", false},
		{"tok-submitter", "$KV." + RunsBucket + ".r-1", false},
		{"tok-approver", "$KV." + RunsBucket + ".r-1", false},
		{"tok-worker", "reins.task.h", false},
		{"tok-submitter", "reins.task.h", false},
		{"tok-admin", "$KV." + RunsBucket + ".r-1", true},
		// Workers keep checkpoints and effects; submitters store workflows.
		{"tok-worker", "$KV." + CheckpointsBucket + ".k", true},
		{"tok-worker", "$KV." + EffectsBucket + ".k", true},
		{"tok-submitter", "$KV." + CheckpointsBucket + ".k", false},
		{"tok-submitter", "$KV." + WorkflowsBucket + ".k", true},
		{"tok-approver", "$KV." + WorkflowsBucket + ".k", false},
		{"tok-worker", "$KV." + WorkflowsBucket + ".k", false},
		// Registered workflows are written by the API (the process's own connection) alone,
		// once validated: a submitter registers through it, never directly.
		{"tok-submitter", "$KV." + RegistryBucket + ".refund", false},
		{"tok-submitter", "$KV." + RegistryBucket + ".refund.v1", false},
		{"tok-approver", "$KV." + RegistryBucket + ".refund", false},
		{"tok-viewer", "$KV." + RegistryBucket + ".refund", false},
		{"tok-worker", "$KV." + RegistryBucket + ".refund", false},
		{"tok-admin", "$KV." + RegistryBucket + ".refund", true},
		// The shared rate limits of providers: every worker writes them, nobody else but the
		// operator (a submitter could otherwise pause a provider for everyone).
		{"tok-worker", "$KV." + LimitsBucket + ".model.openai.gpt-4o", true},
		{"tok-submitter", "$KV." + LimitsBucket + ".model.openai.gpt-4o", false},
		{"tok-approver", "$KV." + LimitsBucket + ".model.openai.gpt-4o", false},
		{"tok-viewer", "$KV." + LimitsBucket + ".provider.openai", false},
		{"tok-admin", "$KV." + LimitsBucket + ".provider.openai", true},
		// The state of schedule triggers is the engines' alone: nobody else moves a due time.
		{"tok-submitter", "$KV." + TriggersBucket + ".schedule.w.t", false},
		{"tok-worker", "$KV." + TriggersBucket + ".schedule.w.t", false},
		{"tok-admin", "$KV." + TriggersBucket + ".schedule.w.t", true},
		// The concurrency keys are the engines' alone: a worker or a person who could write
		// them could free a slot another run holds, or take one out of turn.
		{"tok-worker", "$KV." + ConcurrencyBucket + ".key.k", false},
		{"tok-submitter", "$KV." + ConcurrencyBucket + ".key.k", false},
		{"tok-approver", "$KV." + ConcurrencyBucket + ".run.r", false},
		{"tok-viewer", "$KV." + ConcurrencyBucket + ".key.k", false},
		{"tok-admin", "$KV." + ConcurrencyBucket + ".key.k", true},
		// Sessions are written by workers (the steps that continue them) and admins (delete):
		// no principal writes a conversation of its own making into one.
		{"tok-worker", "$KV." + SessionsBucket + ".k", true},
		{"tok-submitter", "$KV." + SessionsBucket + ".k", false},
		{"tok-approver", "$KV." + SessionsBucket + ".k", false},
		{"tok-viewer", "$KV." + SessionsBucket + ".k", false},
		{"tok-admin", "$KV." + SessionsBucket + ".k", true},
		// No principal creates a durable consumer the legacy way, nor pulls from the engine's
		// consumers; its own consumers' pulls are its own (their creation is the proxy's:
		// TestConsumerProxy).
		{"tok-viewer", "$JS.API.CONSUMER.DURABLE.CREATE." + EventsStream + ".d", false},
		{"tok-worker", "$JS.API.CONSUMER.DURABLE.CREATE." + TasksStream + ".reins-worker-h", false},
		{"tok-viewer", "$JS.API.CONSUMER.MSG.NEXT." + EventsStream + ".reins-engine-00", false},
		{"tok-submitter", "$JS.API.CONSUMER.MSG.NEXT." + EventsStream + ".reins-engine-15", false},
		{"tok-viewer", "$JS.API.CONSUMER.MSG.NEXT." + EventsStream + ".reins-engine-all", false},
		{"tok-worker", "$JS.API.CONSUMER.DELETE." + EventsStream + ".reins-engine-all", false},
		{"tok-viewer", "$JS.API.CONSUMER.MSG.NEXT." + EventsStream + ".mine", true},
		{"tok-admin", "$JS.API.CONSUMER.MSG.NEXT." + EventsStream + ".reins-engine-00", true},
	} {
		if got := canPublish(t, b, tc.token, tc.subject); got != tc.want {
			t.Errorf("%s (%s) publishing on %s: stored %t, want %t", testPrincipals[tc.token].Name, tc.token, tc.subject, got, tc.want)
		}
	}
}

// TestCoreSubjectsByRole: the announcements of ended runs go out on core NATS; only the engine
// publishes them, and a person cannot cancel a worker's handler by sending one.
func TestCoreSubjectsByRole(t *testing.T) {
	b := served(t)
	got := make(chan string, 4)
	sub, err := b.Conn().Subscribe(CancelSubjects, func(m *nats.Msg) { got <- m.Subject })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for _, tok := range []string{"tok-submitter", "tok-approver", "tok-worker", "tok-viewer"} {
		c := open(t, Options{URL: b.ClientURL(), Token: tok})
		if err := c.Conn().Publish("reins.cancel.r-1", nil); err != nil {
			t.Fatal(err)
		}
		if err := c.Conn().Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// The engine's own announcement comes through, after every forged one would have.
	if err := b.Conn().Publish("reins.cancel.r-engine", nil); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "reins.cancel.r-engine" {
		t.Errorf("a forged announcement reached the subscriber: %s", s)
	}
}

// TestReadersRead: viewers, submitters and approvers read and watch run records; a worker reads
// workflows but not run records.
func TestReadersRead(t *testing.T) {
	b := served(t)
	ctx := testCtx(t)
	runs, err := b.JetStream().KeyValue(ctx, RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runs.Put(ctx, "r-1", []byte(`{"run":1}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.JetStream().Publish(ctx, "reins.event.11.r-1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]bool{"tok-viewer": true, "tok-submitter": true, "tok-approver": true, "tok-worker": false, "tok-nothing": false} {
		c := open(t, Options{URL: b.ClientURL(), Token: tok})
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		kv, err := c.JetStream().KeyValue(rctx, RunsBucket)
		if err == nil {
			var e jetstream.KeyValueEntry
			if e, err = kv.Get(rctx, "r-1"); err == nil && string(e.Value()) != `{"run":1}` {
				t.Errorf("%s read %q", tok, e.Value())
			}
		}
		if err == nil { // the last event of a run, as runs show reads it
			var st jetstream.Stream
			if st, err = c.JetStream().Stream(rctx, EventsStream); err == nil {
				_, err = st.GetLastMsgForSubject(rctx, "reins.event.11.r-1")
			}
		}
		if err == nil {
			var w jetstream.KeyWatcher
			if w, err = kv.Watch(rctx, "r-1"); err == nil {
				select {
				case e := <-w.Updates():
					if e == nil {
						err = errors.New("no current value")
					}
				case <-rctx.Done():
					err = rctx.Err()
				}
				_ = w.Stop()
			}
		}
		cancel()
		if (err == nil) != want {
			t.Errorf("%s reading and watching run records: %v, want allowed %t", testPrincipals[tok].Name, err, want)
		}
	}
}

// TestReadersReadRegistry: viewers, submitters and approvers read and list the registered
// workflows; a worker and a principal without roles do not.
func TestReadersReadRegistry(t *testing.T) {
	b := served(t)
	ctx := testCtx(t)
	reg, err := b.JetStream().KeyValue(ctx, RegistryBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Put(ctx, "refund", []byte(`{"version":1}`)); err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]bool{"tok-viewer": true, "tok-submitter": true, "tok-approver": true, "tok-worker": false, "tok-nothing": false} {
		c := open(t, Options{URL: b.ClientURL(), Token: tok})
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		kv, err := c.JetStream().KeyValue(rctx, RegistryBucket)
		if err == nil {
			var e jetstream.KeyValueEntry
			if e, err = kv.Get(rctx, "refund"); err == nil && string(e.Value()) != `{"version":1}` {
				t.Errorf("%s read %q", tok, e.Value())
			}
		}
		if err == nil {
			var w jetstream.KeyWatcher
			if w, err = kv.WatchFiltered(rctx, []string{"*"}); err == nil {
				select {
				case e := <-w.Updates():
					if e == nil {
						err = errors.New("no current value")
					}
				case <-rctx.Done():
					err = rctx.Err()
				}
				_ = w.Stop()
			}
		}
		cancel()
		if (err == nil) != want {
			t.Errorf("%s reading and listing registered workflows: %v, want allowed %t", testPrincipals[tok].Name, err, want)
		}
	}
}

// TestWhoAmI: the server says who a connection is and what it may publish; the process's own
// connections are the engine, with no restriction.
func TestWhoAmI(t *testing.T) {
	b := served(t)
	name, pub, err := b.WhoAmI(testCtx(t))
	if err != nil || name != EngineName || pub != nil {
		t.Errorf("own connection: %q %v %v; want %q with no restriction", name, pub, err, EngineName)
	}
	c := open(t, Options{URL: b.ClientURL(), Token: "tok-approver"})
	name, pub, err = c.WhoAmI(testCtx(t))
	if err != nil || name != "alice" {
		t.Fatalf("approver: %q %v", name, err)
	}
	may := func(s string) bool {
		for _, p := range pub {
			if SubjectMatches(p, s) {
				return true
			}
		}
		return false
	}
	if !may("reins.event.11.r-1.human.alice") || may("reins.event.11.r-1.submit.alice") || may("reins.event.11.r-1") {
		t.Errorf("approver may publish %v", pub)
	}
}

func TestSubjectPartition(t *testing.T) {
	for subject, want := range map[string]int{
		"reins.event.11.r-1": 11, "reins.event.00.x.human.a": 0, "reins.event.15.y": 15,
		"reins.event.16.y": -1, "reins.event.1.y": -1, "reins.event.ab.y": -1, "reins.task.11.y": -1, "reins.event.11": -1,
	} {
		p, ok := SubjectPartition(subject)
		if !ok {
			p = -1
		}
		if p != want {
			t.Errorf("SubjectPartition(%q) = %d, want %d", subject, p, want)
		}
	}
	// Every run id's subject is in its partition's filter.
	for _, id := range []string{"r-1", "a", "run/with/children", strings.Repeat("z", 200)} {
		subj, err := EventSubject(id)
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := SubjectPartition(subj); !ok || p != Partition(id) || !SubjectMatches(PartitionSubjects(p), subj) {
			t.Errorf("run %s: subject %s, partition %d %t, want %d", id, subj, p, ok, Partition(id))
		}
	}
}

func TestSubjectMatches(t *testing.T) {
	for _, tc := range []struct {
		pattern, subject string
		want             bool
	}{
		{"a.b", "a.b", true},
		{"a.b", "a.b.c", false},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.>", "a.b.c", true},
		{"a.>", "a", false},
		{"reins.event.*.*.human.alice", "reins.event.11.r-1.human.alice", true},
		{"reins.event.*.*.human.alice", "reins.event.11.r-1.human.bob", false},
		{"reins.event.*.*", "reins.event.11.r-1.human.alice", false},
		{">", "x", true},
	} {
		if got := SubjectMatches(tc.pattern, tc.subject); got != tc.want {
			t.Errorf("SubjectMatches(%q, %q) = %t, want %t", tc.pattern, tc.subject, got, tc.want)
		}
	}
}

func TestParseEventSubject(t *testing.T) {
	for _, tc := range []struct {
		subject, run, kind, who string
		ok                      bool
	}{
		{"reins.event.11.r-1", "r-1", "", "", true},
		{"reins.event.11.r-1.human.alice", "r-1", HumanKind, "alice", true},
		{"reins.event.11.r-1.submit.sam", "r-1", SubmitKind, "sam", true},
		{"reins.event.11.r-1.other.sam", "", "", "", false},
		{"reins.event.11.r-1.human", "", "", "", false},
		{"reins.event.11.r-1.human.alice.x", "", "", "", false},
		{"reins.task.r-1", "", "", "", false},
		{"reins.event.", "", "", "", false},
		{"reins.event.r-1", "", "", "", false},                // no partition
		{"reins.event.03.r-1", "", "", "", false},             // another partition than the run's
		{"reins.event.03.r-1.human.alice", "", "", "", false}, // forged, with a principal
	} {
		run, kind, who, ok := ParseEventSubject(tc.subject)
		if run != tc.run || kind != tc.kind || who != tc.who || ok != tc.ok {
			t.Errorf("ParseEventSubject(%q) = %q %q %q %t", tc.subject, run, kind, who, ok)
		}
	}
}

// TestValuesByRole: submitters (run inputs) and workers (outputs, checkpoints) store values
// larger than a message; every reader and workers read them; nobody but the engine and admins
// removes them.
func TestValuesByRole(t *testing.T) {
	b := served(t)
	ctx := testCtx(t)
	own, err := OpenValues(ctx, b.JetStream(), Names{})
	if err != nil {
		t.Fatal(err)
	}
	big := []byte(strings.Repeat("v", 3<<20)) // several chunks, more than a message
	if err := own.PutValue(ctx, "r-1/stored", big); err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]struct{ put, get bool }{
		"tok-admin": {true, true}, "tok-submitter": {true, true}, "tok-worker": {true, true},
		"tok-viewer": {false, true}, "tok-approver": {false, true}, "tok-nothing": {false, false},
	} {
		c := open(t, Options{URL: b.ClientURL(), Token: tok})
		// What is refused may end in a timeout, so it is given 3 s; what is allowed, a failsafe
		// (3 MiB written in chunks can take longer than 3 s on a loaded machine).
		within := func(allowed bool) (context.Context, context.CancelFunc) {
			if allowed {
				return context.WithTimeout(ctx, failsafe)
			}
			return context.WithTimeout(ctx, 3*time.Second)
		}
		rctx, cancelRead := within(want.get)
		vals, err := OpenValues(rctx, c.JetStream(), Names{})
		var getErr, putErr error = err, err
		if err == nil {
			var data []byte
			if data, getErr = vals.GetValue(rctx, "r-1/stored", int64(len(big))); getErr == nil && string(data) != string(big) {
				getErr = errors.New("read other bytes")
			}
			wctx, cancelWrite := within(want.put)
			putErr = vals.PutValue(wctx, "r-1/by-"+tok, big)
			cancelWrite()
		}
		cancelRead()
		if (getErr == nil) != want.get || (putErr == nil) != want.put {
			t.Errorf("%s: read %v, store %v; want read %t, store %t", tok, getErr, putErr, want.get, want.put)
		}
		if tok == "tok-worker" || tok == "tok-submitter" {
			dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if _, err := vals.DeleteValues(dctx, func(string) bool { return true }); err == nil {
				t.Errorf("%s removed values", tok)
			}
			cancel()
		}
	}
	n, err := own.DeleteValues(ctx, func(run string) bool { return run == "r-1" })
	if err != nil || n != 4 {
		t.Errorf("the engine removed %d values (%v), want 4", n, err)
	}
	if _, err := own.GetValue(ctx, "r-1/stored", int64(len(big))); !errors.Is(err, ErrNoValue) {
		t.Errorf("a removed value reads %v, want ErrNoValue", err)
	}
}

// TestDeltasByRole: workers publish the token deltas of streaming steps on core NATS and the
// engine's connection (the API's) receives them; nobody else publishes one.
func TestDeltasByRole(t *testing.T) {
	b := served(t)
	got := make(chan string, 8)
	sub, err := b.Conn().Subscribe(DeltaSubjects, func(m *nats.Msg) { got <- string(m.Data) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	subj, err := Names{}.DeltaSubject("r-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"tok-submitter", "tok-approver", "tok-viewer", "tok-worker"} {
		c := open(t, Options{URL: b.ClientURL(), Token: tok})
		if err := c.Conn().Publish(subj, []byte(tok)); err != nil {
			t.Fatal(err)
		}
		if err := c.Conn().Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if s := <-got; s != "tok-worker" {
		t.Errorf("a delta from %s reached the subscriber, want only the worker's", s)
	}
}
