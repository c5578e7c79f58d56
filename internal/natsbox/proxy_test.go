package natsbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// permissionViolation is what apiAnswer returns for a request the server's permissions refused.
const permissionViolation = "the server's permissions refused the request"

// apiAnswer sends one JetStream API request on c and returns the description of the error it
// answers, "" for success.
func apiAnswer(t *testing.T, c *Box, subject string, body any) string {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	inbox := c.Conn().NewInbox()
	sub, err := c.Conn().SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := c.Conn().PublishRequest(subject, inbox, data); err != nil {
		t.Fatal(err)
	}
	if err := c.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := c.Conn().LastError(); errors.Is(err, nats.ErrPermissionViolation) {
		return permissionViolation
	}
	m, err := sub.NextMsg(failsafe)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	var resp struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		t.Fatalf("%s answered %q: %v", subject, m.Data, err)
	}
	if resp.Error == nil {
		return ""
	}
	return resp.Error.Description
}

// awaitQuiet fails the test if sub received anything before the engine's sentinel, published
// on subject once every earlier request of c was answered.
func awaitQuiet(t *testing.T, b, c *Box, sub *nats.Subscription, subject string) {
	t.Helper()
	if _, err := c.Conn().Request("$JS.API.INFO", nil, failsafe); err != nil {
		t.Fatal(err)
	}
	if err := b.Conn().Publish(subject, []byte("sentinel")); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := sub.NextMsg(failsafe)
		if err != nil {
			t.Fatalf("the sentinel never arrived on %s: %v", subject, err)
		}
		if string(m.Data) == "sentinel" {
			return
		}
		t.Errorf("%s received %.100q for a principal", subject, m.Data)
	}
}

// TestRepliesStayInAccount: a principal names a subject it may not publish on as the reply of
// requests the server answers (a message get of a value it wrote, the account's JetStream
// information, who it is, a publish to a bucket it writes): the answers never reach that
// subject in the engine's account, and nothing is stored there. (On one account, each of these
// stored a message on a run's events or its record.)
func TestRepliesStayInAccount(t *testing.T) {
	b := served(t)
	ctx := testCtx(t)
	sam := open(t, Options{URL: b.ClientURL(), Token: "tok-submitter"})
	kv, err := sam.JetStream().KeyValue(ctx, WorkflowsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "evil", []byte(`{"forged":true}`)); err != nil {
		t.Fatal(err)
	}
	get := "$JS.API.DIRECT.GET.KV_" + WorkflowsBucket + ".$KV." + WorkflowsBucket + ".evil"
	for _, tc := range []struct{ token, subject, target string }{
		{"tok-submitter", get, "reins.event.11.r-1"},
		{"tok-submitter", get, "$KV." + RunsBucket + ".r-1"},
		{"tok-submitter", get, "reins.cancel.r-1"},
		{"tok-submitter", "$KV." + WorkflowsBucket + ".k", "reins.task.h"},
		{"tok-nothing", "$SYS.REQ.USER.INFO", "$KV." + RunsBucket + ".r-2"},
		{"tok-viewer", "$JS.API.INFO", "reins.event.11.r-2"},
		{"tok-viewer", "$JS.API.STREAM.INFO." + EventsStream, "reins.delta.r-2"},
		{"tok-worker", "$JS.API.STREAM.INFO." + TasksStream, "$JS.API.STREAM.DELETE." + EventsStream},
	} {
		t.Run(testPrincipals[tc.token].Name+"→"+tc.target, func(t *testing.T) {
			c := open(t, Options{URL: b.ClientURL(), Token: tc.token})
			sub, err := b.Conn().SubscribeSync(tc.target)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := b.Conn().Flush(); err != nil {
				t.Fatal(err)
			}
			if err := c.Conn().PublishRequest(tc.subject, tc.target, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			awaitQuiet(t, b, c, sub, tc.target)
		})
	}
	for _, s := range []string{EventsStream, TasksStream} {
		if _, err := b.JetStream().Stream(ctx, s); err != nil {
			t.Errorf("stream %s: %v", s, err)
		}
	}
	runs, err := b.JetStream().KeyValue(ctx, RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"r-1", "r-2"} {
		if e, err := runs.Get(ctx, key); err == nil && string(e.Value()) != "sentinel" {
			t.Errorf("run record %s holds %.100q", key, e.Value())
		}
	}
}

// TestConsumerProxy: what each role may ask of the consumer proxy through its account's
// "$JS.API.CONSUMER.…" subjects, and what the server holds after.
func TestConsumerProxy(t *testing.T) {
	b := served(t)
	events, tasks := EventsStream, TasksStream
	runs := "KV_" + RunsBucket
	pull := func(stream string, cfg map[string]any) map[string]any {
		if cfg == nil {
			cfg = map[string]any{}
		}
		if _, ok := cfg["ack_policy"]; !ok {
			cfg["ack_policy"] = "none"
		}
		return map[string]any{"stream_name": stream, "config": cfg}
	}
	task, _ := TaskSubject("echo")
	for _, tc := range []struct {
		name, token, subject string
		body                 map[string]any
		refusal              string // "" for allowed
	}{
		{"viewer pull", "tok-viewer", "$JS.API.CONSUMER.CREATE." + events + ".p1", pull(events, map[string]any{"name": "p1"}), ""},
		{"viewer push to own inbox", "tok-viewer", "$JS.API.CONSUMER.CREATE." + runs + ".w1", pull(runs, map[string]any{"name": "w1", "deliver_subject": "_INBOX.val.1"}), ""},
		{"viewer push to a delta", "tok-viewer", "$JS.API.CONSUMER.CREATE." + events + ".x", pull(events, map[string]any{"name": "x", "deliver_subject": "reins.delta.r-1"}), "principal val may not create a push consumer on REINS_EVENTS delivering to reins.delta.r-1"},
		{"viewer push to the API", "tok-viewer", "$JS.API.CONSUMER.CREATE." + events + ".x", pull(events, map[string]any{"name": "x", "deliver_subject": "$JS.API.STREAM.DELETE.REINS_TASKS"}), "may not create a push consumer"},
		{"viewer push to an inbox wildcard", "tok-viewer", "$JS.API.CONSUMER.CREATE." + events + ".x", pull(events, map[string]any{"name": "x", "deliver_subject": "_INBOX.*"}), "may not create a push consumer"},
		{"viewer durable", "tok-viewer", "$JS.API.CONSUMER.CREATE." + events + ".d1", pull(events, map[string]any{"durable_name": "d1"}), `principal val may not create the durable consumer "d1" on REINS_EVENTS`},
		{"viewer legacy durable", "tok-viewer", "$JS.API.CONSUMER.DURABLE.CREATE." + events + ".d2", pull(events, map[string]any{"durable_name": "d2"}), permissionViolation},
		{"viewer on tasks", "tok-viewer", "$JS.API.CONSUMER.CREATE." + tasks + ".x", pull(tasks, nil), permissionViolation},
		{"viewer filter outside", "tok-viewer", "$JS.API.CONSUMER.CREATE." + runs + ".x", pull(runs, map[string]any{"name": "x", "filter_subject": "reins.event.>"}), `may not filter a consumer of KV_reins_runs on "reins.event.>"`},
		{"viewer unknown field", "tok-viewer", "$JS.API.CONSUMER.CREATE." + events + ".x", pull(events, map[string]any{"name": "x", "direct": true}), `principal val may not set "direct"`},
		{"viewer deliver group", "tok-viewer", "$JS.API.CONSUMER.CREATE." + events + ".x", pull(events, map[string]any{"name": "x", "deliver_subject": "_INBOX.x", "deliver_group": "g"}), `may not set "deliver_group"`},
		{"viewer engine's name", "tok-viewer", "$JS.API.CONSUMER.CREATE." + events + ".reins-engine-00", pull(events, map[string]any{"name": "reins-engine-00"}), permissionViolation},
		{"worker push", "tok-worker", "$JS.API.CONSUMER.CREATE.KV_" + CheckpointsBucket + ".x", pull("KV_"+CheckpointsBucket, map[string]any{"name": "x", "deliver_subject": "reins.cancel.r-1"}), "principal wanda may not create a push consumer"},
		{"worker tasks", "tok-worker", "$JS.API.CONSUMER.CREATE." + tasks + "." + WorkerConsumerName("echo"), pull(tasks, map[string]any{"durable_name": WorkerConsumerName("echo"), "filter_subject": task, "ack_policy": "explicit"}), ""},
		{"worker tasks squat", "tok-worker", "$JS.API.CONSUMER.CREATE." + tasks + ".squat", pull(tasks, map[string]any{"durable_name": "squat", "filter_subject": task, "ack_policy": "explicit"}), "principal wanda may not create the consumer \"squat\" of handler echo"},
		{"worker keeper", "tok-worker", "$JS.API.CONSUMER.CREATE." + tasks + "." + WorkerConsumerName(KeeperHandler), pull(tasks, map[string]any{"durable_name": WorkerConsumerName(KeeperHandler), "filter_subject": KeeperSubject}), "of the keeper message"},
		{"worker tasks push", "tok-worker", "$JS.API.CONSUMER.CREATE." + tasks + "." + WorkerConsumerName("echo"), pull(tasks, map[string]any{"durable_name": WorkerConsumerName("echo"), "filter_subject": task, "deliver_subject": "_INBOX.w"}), "may not create a push consumer on REINS_TASKS"},
		{"nobody", "tok-nothing", "$JS.API.CONSUMER.CREATE." + events + ".x", pull(events, nil), permissionViolation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := open(t, Options{URL: b.ClientURL(), Token: tc.token})
			got := apiAnswer(t, c, tc.subject, tc.body)
			switch {
			case tc.refusal == "" && got != "":
				t.Errorf("refused: %s", got)
			case tc.refusal != "" && !strings.Contains(got, tc.refusal):
				t.Errorf("answered %q, want a refusal with %q", got, tc.refusal)
			case strings.Contains(got, "\n") || strings.Count(got, ". ") > 0:
				t.Errorf("the refusal %q is not one sentence", got)
			}
		})
	}
	// What the server holds: no durable of the viewer's, the consumers it allowed owned by
	// their principal, idle within MaxConsumerIdle, delivering to the principal's alone.
	ctx := testCtx(t)
	for _, s := range []string{events, runs} {
		st, err := b.JetStream().Stream(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		list := st.ListConsumers(ctx)
		for info := range list.Info() {
			c := info.Config
			if c.Durable != "" || c.Metadata[OwnerKey] != "val" || c.InactiveThreshold <= 0 || c.InactiveThreshold > MaxConsumerIdle {
				t.Errorf("consumer %s of %s: durable %q, owner %q, inactive threshold %s", info.Name, s, c.Durable, c.Metadata[OwnerKey], c.InactiveThreshold)
			}
		}
		if list.Err() != nil {
			t.Fatal(list.Err())
		}
	}
}

// TestConsumerProxyRemove: a principal removes its own consumers, never another's.
func TestConsumerProxyRemove(t *testing.T) {
	b := served(t)
	ctx := testCtx(t)
	val := open(t, Options{URL: b.ClientURL(), Token: "tok-viewer"})
	sam := open(t, Options{URL: b.ClientURL(), Token: "tok-submitter"})
	for _, push := range []bool{false, true} { // a pull consumer, and a push one to an inbox of its owner's (a KV watch)
		for _, c := range []*Box{val, sam} {
			name := "c-" + c.names.EventsStream() + fmt.Sprint(time.Now().UnixNano())
			cfg := jetstream.ConsumerConfig{Name: name, AckPolicy: jetstream.AckNonePolicy}
			var err error
			if push {
				cfg.DeliverSubject = c.Conn().NewRespInbox()
				_, err = c.JetStream().CreatePushConsumer(ctx, EventsStream, cfg)
			} else {
				_, err = c.JetStream().CreateConsumer(ctx, EventsStream, cfg)
			}
			if err != nil {
				t.Fatal(err)
			}
			other := sam
			if c == sam {
				other = val
			}
			if err := other.JetStream().DeleteConsumer(ctx, EventsStream, name); err == nil || !strings.Contains(err.Error(), "may not remove consumer") {
				t.Errorf("another principal removed %s (push %v): %v", name, push, err)
			}
			if err := c.JetStream().DeleteConsumer(ctx, EventsStream, name); err != nil {
				t.Errorf("its owner cannot remove %s (push %v): %v", name, push, err)
			}
		}
	}
}

// TestConsumerProxyCap: a principal holds at most Options.MaxConsumersPerPrincipal consumers;
// the next is refused naming the cap, at once, and the server keeps answering others.
func TestConsumerProxyCap(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Authenticate: principalAuth, MaxConsumersPerPrincipal: 3})
	ensure(t, b.JetStream())
	ctx := testCtx(t)
	val := open(t, Options{URL: b.ClientURL(), Token: "tok-viewer"})
	for i := range 3 {
		if _, err := val.JetStream().CreateConsumer(ctx, EventsStream, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy}); err != nil {
			t.Fatalf("consumer %d within the cap: %v", i+1, err)
		}
	}
	_, err := val.JetStream().CreateConsumer(ctx, EventsStream, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy})
	var api *jetstream.APIError
	if !errors.As(err, &api) || !strings.Contains(api.Description, "principal val may not hold more than 3 consumers at once (max_consumers_per_principal)") {
		t.Errorf("a 4th consumer: %v, want the cap named", err)
	}
	// Another principal's cap is its own.
	sam := open(t, Options{URL: b.ClientURL(), Token: "tok-submitter"})
	if _, err := sam.JetStream().CreateConsumer(ctx, EventsStream, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy}); err != nil {
		t.Errorf("sam's first consumer: %v", err)
	}
}

// TestInboxesIsolated: a principal that listens on every inbox hears none of another's replies.
func TestInboxesIsolated(t *testing.T) {
	b := served(t)
	ctx := testCtx(t)
	val := open(t, Options{URL: b.ClientURL(), Token: "tok-viewer"})
	spy, err := val.Conn().SubscribeSync("_INBOX.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := val.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	sam := open(t, Options{URL: b.ClientURL(), Token: "tok-submitter"})
	kv, err := sam.JetStream().KeyValue(ctx, RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-w.Updates()
	_ = w.Stop()
	if _, err := val.Conn().Request("$JS.API.INFO", nil, failsafe); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := spy.NextMsg(100 * time.Millisecond)
		if err != nil {
			break
		}
		var info struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(m.Data, &info) != nil || info.Type != "io.nats.jetstream.api.v1.account_info_response" {
			t.Errorf("val's _INBOX.> received %s: %.80q", m.Subject, m.Data)
		}
	}
}

// TestCheckConsumerRequest: the rewriting of what the proxy forwards.
func TestCheckConsumerRequest(t *testing.T) {
	n, _ := NewNames("acme")
	val := Identity{Name: "val", Roles: []string{RoleViewer}}
	body := `{"stream_name":"acme_REINS_EVENTS","config":{"deliver_subject":"_INBOX.abc","inactive_threshold":3600000000000,"metadata":{"reins.principal":"sam","x":"y"}},"action":"update"}`
	req, err := checkConsumerRequest(n, val, "CONSUMER.CREATE.acme_REINS_EVENTS.c", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Config struct {
			Deliver  string            `json:"deliver_subject"`
			Idle     time.Duration     `json:"inactive_threshold"`
			Metadata map[string]string `json:"metadata"`
		} `json:"config"`
		Action string `json:"action"`
	}
	if err := json.Unmarshal(req.body, &got); err != nil {
		t.Fatal(err)
	}
	if got.Config.Deliver != "acme.reins.deliver.val._INBOX.abc" || got.Config.Idle != MaxConsumerIdle || got.Config.Metadata[OwnerKey] != "val" ||
		got.Config.Metadata["x"] != "y" || got.Action != "create" || !req.owned || req.subject != "$JS.API.CONSUMER.CREATE.acme_REINS_EVENTS.c" {
		t.Errorf("forwarded %s as %+v", req.body, got)
	}
	if _, err := checkConsumerRequest(n, val, "CONSUMER.CREATE.REINS_EVENTS.c", []byte(`{"stream_name":"REINS_EVENTS","config":{}}`)); err == nil {
		t.Error("a consumer of another namespace's stream was allowed")
	}
}

func TestSubjectWithin(t *testing.T) {
	for _, tc := range []struct {
		f, p string
		want bool
	}{
		{"$KV.b.>", "$KV.b.>", true},
		{"$KV.b.k", "$KV.b.>", true},
		{"$KV.b.*", "$KV.b.>", true},
		{"$KV.b", "$KV.b.>", false},
		{"$KV.>", "$KV.b.>", false},
		{"$KV.*.k", "$KV.b.>", false},
		{"reins.event.*.r", "reins.event.>", true},
		{"a.b", "a.*", true},
		{"a.*", "a.b", false},
		{"a.>", "a.*", false},
		{"a.b.c", "a.*", false},
		{">", "a.>", false},
	} {
		if got := subjectWithin(tc.f, tc.p); got != tc.want {
			t.Errorf("subjectWithin(%q, %q) = %t, want %t", tc.f, tc.p, got, tc.want)
		}
	}
	for s, want := range map[string]bool{"a.b": true, "a.*.>": true, "a..b": false, "a.>.b": false, "a.b*": false, "": false, "a b": false, "_INBOX.x": true} {
		if got := validSubject(s); got != want {
			t.Errorf("validSubject(%q) = %t, want %t", s, got, want)
		}
	}
}

// FuzzCheckConsumerRequest: whatever a principal sends, what the proxy forwards is permitted
// by its roles, of a stream of its namespace, durable only as a worker's consumer of a
// handler's tasks, delivering to the principal's inboxes or nowhere, owned by it and idle away
// within MaxConsumerIdle; and a refusal names it.
func FuzzCheckConsumerRequest(f *testing.F) {
	for _, seed := range []struct{ op, body string }{
		{"CONSUMER.CREATE.REINS_EVENTS", `{"stream_name":"REINS_EVENTS","config":{"deliver_subject":"_INBOX.x"}}`},
		{"CONSUMER.CREATE.REINS_EVENTS.n", `{"stream_name":"REINS_EVENTS","config":{"name":"n","filter_subjects":["reins.event.*.r"]}}`},
		{"CONSUMER.CREATE.KV_reins_runs", `{"stream_name":"KV_reins_runs","config":{"deliver_subject":"reins.delta.r"}}`},
		{"CONSUMER.CREATE.REINS_TASKS.reins-worker-h", `{"stream_name":"REINS_TASKS","config":{"durable_name":"reins-worker-h","filter_subject":"reins.task.h"}}`},
		{"CONSUMER.DURABLE.CREATE.REINS_EVENTS.d", `{}`},
		{"CONSUMER.DELETE.REINS_EVENTS.x", ``},
		{"CONSUMER.CREATE.OBJ_reins_values", `{"stream_name":"OBJ_reins_values","config":{"filter_subject":"$O.reins_values.C.x","inactive_threshold":-5}}`},
		{"STREAM.DELETE.REINS_EVENTS", `{}`},
	} {
		f.Add(seed.op, seed.body)
	}
	ids := []Identity{
		{Name: "val", Roles: []string{RoleViewer}},
		{Name: "wanda", Roles: []string{RoleWorker}},
		{Name: "sam", Roles: []string{RoleSubmitter, RoleApprover}},
	}
	n := Names{}
	f.Fuzz(func(t *testing.T, op, body string) {
		for _, id := range ids {
			req, err := checkConsumerRequest(n, id, op, []byte(body))
			if err != nil {
				var r *refusal
				if !errors.As(err, &r) && !strings.Contains(err.Error(), "cannot write") {
					t.Fatalf("%s: an error that is not a refusal: %v", id.Name, err)
				}
				if r != nil && !strings.Contains(r.msg, "principal "+id.Name+" ") {
					t.Fatalf("a refusal of %s that does not name it: %q", id.Name, r.msg)
				}
				continue
			}
			if !permitted(n.Permissions(id), req.subject) || !strings.HasPrefix(req.subject, "$JS.API.CONSUMER.") {
				t.Fatalf("%s: forwarded %s, which its roles do not permit", id.Name, req.subject)
			}
			if req.remove {
				continue
			}
			var fwd struct {
				Config struct {
					Durable  string            `json:"durable_name"`
					Deliver  string            `json:"deliver_subject"`
					Idle     time.Duration     `json:"inactive_threshold"`
					Metadata map[string]string `json:"metadata"`
				} `json:"config"`
			}
			if err := json.Unmarshal(req.body, &fwd); err != nil {
				t.Fatalf("%s: forwarded %q, which does not read: %v", id.Name, req.body, err)
			}
			c := fwd.Config
			if req.stream == n.TasksStream() {
				if !id.Has(RoleWorker) || !strings.HasPrefix(c.Durable, WorkerConsumerPrefix) || c.Deliver != "" {
					t.Fatalf("%s: forwarded a consumer of the tasks %q", id.Name, req.body)
				}
				continue
			}
			if c.Durable != "" || c.Idle <= 0 || c.Idle > MaxConsumerIdle || c.Metadata[OwnerKey] != id.Name ||
				c.Deliver != "" && !strings.HasPrefix(c.Deliver, n.PrincipalDeliverPrefix(id.Name)+inboxPrefix) {
				t.Fatalf("%s: forwarded %q", id.Name, req.body)
			}
		}
	})
}
