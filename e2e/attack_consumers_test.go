//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
)

// Finding 6: a consumer is the server's own authority to deliver stored messages, and every
// request's answer goes where its reply subject says. These attacks hold a principal's token
// and try to have the server deliver to, or store on, subjects that principal may not publish
// on; docs/security.md, "Consumers and replies".

// gateWorkflow waits for a person for an hour: a run that stays live while it is attacked.
const gateWorkflow = `name = "gate"
deadline = "1h"

[[steps]]
id = "ask"
type = "approval"
prompt = "Ship it?"
`

// napWorkflow ends at once.
const napWorkflow = `name = "nap"

[[steps]]
id = "nap"
type = "sleep"
duration = "10ms"
`

// jsAPI sends one JetStream API request on nc and returns the description of the error it
// answers ("" for success); err is for no answer at all.
func jsAPI(nc *nats.Conn, subject string, body any) (string, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return "", err
	}
	m, err := nc.Request(subject, data, 10*time.Second)
	if err != nil {
		return "", err
	}
	var resp struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return "", fmt.Errorf("answer %q: %w", m.Data, err)
	}
	if resp.Error != nil {
		return resp.Error.Description, nil
	}
	return "", nil
}

// refused fails the test unless the answer desc is a refusal of principal: one sentence that
// names it and says what it may not do.
func refused(t *testing.T, what, principal, desc string, err error) {
	t.Helper()
	switch {
	case err != nil:
		t.Errorf("%s: no answer (%v), want a refusal naming %s", what, err, principal)
	case desc == "":
		t.Errorf("%s: the server did it, want a refusal", what)
	case !strings.Contains(desc, "principal "+principal+" may not") || strings.Count(desc, ". ") > 0:
		t.Errorf("%s: refused with %q, want one sentence naming principal %s and what it may not do", what, desc, principal)
	}
}

// tap is the operator's subscription to a subject an attack aims at.
type tap struct {
	t       *testing.T
	nc      *nats.Conn
	subject string
	msgs    chan *nats.Msg
}

// tap subscribes the admin's connection to subject.
func (h *hostile) tap(subject string) *tap {
	h.t.Helper()
	nc := h.conn(h.admin)
	tp := &tap{t: h.t, nc: nc, subject: subject, msgs: make(chan *nats.Msg, 1024)}
	if _, err := nc.ChanSubscribe(subject, tp.msgs); err != nil {
		h.t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		h.t.Fatal(err)
	}
	return tp
}

// quiet fails the test if anything arrived on the tap's subject before a sentinel the operator
// publishes there now. The attacks whose answers it waits for come first: the attacker's
// last request (after) was answered before the sentinel left.
func (tp *tap) quiet(after func()) {
	tp.t.Helper()
	after()
	sentinel := fmt.Sprintf("sentinel-%d", time.Now().UnixNano())
	if err := tp.nc.Publish(tp.subject, []byte(sentinel)); err != nil {
		tp.t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case m := <-tp.msgs:
			if string(m.Data) == sentinel {
				return
			}
			tp.t.Errorf("the server delivered %.120q to %s for the attacker", m.Data, tp.subject)
		case <-deadline:
			tp.t.Fatalf("the sentinel never arrived on %s", tp.subject)
		}
	}
}

// settle is a request of the attacker whose answer it waits for: once answered, what the
// server did with the attacker's earlier requests is done.
func settle(t *testing.T, nc *nats.Conn) func() {
	return func() {
		t.Helper()
		if _, err := nc.Request("$JS.API.INFO", nil, 10*time.Second); err != nil {
			t.Fatalf("the attacker's own request: %v", err)
		}
	}
}

// startRun starts a run of the registered workflow as the principal of token.
func (h *hostile) startRun(token, workflow, runID string) {
	h.t.Helper()
	status, _, body := h.do(token, "POST", "/v1/runs", fmt.Sprintf(`{"workflow":%q,"run_id":%q}`, workflow, runID))
	if status != http.StatusCreated && status != http.StatusOK {
		h.t.Fatalf("start %s: %d %s", runID, status, body)
	}
}

// sse follows a run's events over the API as the principal of token: one string per line.
func (h *hostile) sse(token, runID string) <-chan string {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", h.base+"/v1/runs/"+runID+"/events", nil)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("GET /v1/runs/%s/events: %d", runID, resp.StatusCode)
	}
	lines := make(chan string, 1024)
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return lines
}

// pushConsumer is the subject and body of a request for consumer name of stream that delivers
// to deliver.
func pushConsumer(stream, name, filter, deliver string) (string, map[string]any) {
	cfg := map[string]any{"name": name, "deliver_subject": deliver, "deliver_policy": "all", "ack_policy": "none"}
	if filter != "" {
		cfg["filter_subject"] = filter
	}
	return "$JS.API.CONSUMER.CREATE." + stream + "." + name, map[string]any{"stream_name": stream, "config": cfg}
}

// TestAttackPushConsumers: vera, a viewer, asks for push consumers of the events stream that
// deliver to subjects she may not publish on (another run's deltas, its cancel subject, its
// engine and worker event subject, the JetStream API): each is refused with a sentence naming
// her, nothing arrives on the subject, and the proxy's own subjects are out of her reach.
func TestAttackPushConsumers(t *testing.T) {
	h := hostileServer(t, "")
	vera := h.conn(attackViewerToken)
	run := "r-bob-push"
	event, err := natsbox.EventSubject(run)
	if err != nil {
		t.Fatal(err)
	}
	for i, target := range []string{"reins.delta." + run, "reins.cancel." + run, event, event + ".engine",
		"$JS.API.STREAM.DELETE." + natsbox.DLQStream, "$KV." + natsbox.RunsBucket + "." + run} {
		t.Run(target, func(t *testing.T) {
			tp := h.tap(target)
			subject, body := pushConsumer(natsbox.EventsStream, fmt.Sprintf("vera-push-%d", i), "", target)
			desc, err := jsAPI(vera, subject, body)
			refused(t, "vera's push consumer delivering to "+target, "vera", desc, err)
			tp.quiet(settle(t, vera))
		})
	}
	// The proxy's subjects in the server's account are not hers to publish on, under her name
	// or bob's: she reaches the proxy only through her account's imports.
	for _, s := range []string{"reins.jsproxy.vera.CONSUMER.CREATE." + natsbox.EventsStream, "reins.jsproxy.bob.CONSUMER.CREATE." + natsbox.EventsStream} {
		_, err := vera.Request(s, []byte(`{}`), 2*time.Second)
		if err == nil {
			t.Errorf("vera's request on %s was answered", s)
		}
	}
	h.healthy()
}

// TestAttackInjectDelta: mallory stores a model reply of her making (a delta of bob's live
// run) where she may (an event of her own subject), and has the server send it to the run's
// delta subject: by a push consumer, and by a message get whose reply subject is that subject.
// Bob's event stream (GET /v1/runs/{id}/events) never shows it; nor does the answer of a
// request of hers become a run record.
func TestAttackInjectDelta(t *testing.T) {
	h := hostileServer(t, "")
	h.register(attackBobToken, "gate", gateWorkflow)
	run := "r-bob-live"
	h.startRun(attackBobToken, "gate", run)
	lines := h.sse(attackBobToken, run)

	mallory := h.conn(attackMalloryToken)
	own, err := natsbox.PrincipalSubject("r-mallory-1", natsbox.SubmitKind, "mallory")
	if err != nil {
		t.Fatal(err)
	}
	fake := fmt.Sprintf(`{"run_id":%q,"step":"ask","iteration":1,"turn":1,"text":"MALLORY-WAS-HERE"}`, run)
	if _, err := mallory.Request(own, []byte(fake), 10*time.Second); err != nil {
		t.Fatalf("mallory stores a message on her own subject: %v", err)
	}
	subject, body := pushConsumer(natsbox.EventsStream, "mallory-push", own, "reins.delta."+run)
	desc, err := jsAPI(mallory, subject, body)
	refused(t, "mallory's push consumer delivering to bob's deltas", "mallory", desc, err)
	// No consumer at all: the answer of a message get, sent to the reply subject she names.
	if err := mallory.PublishRequest("$JS.API.DIRECT.GET."+natsbox.EventsStream+"."+own, "reins.delta."+run, nil); err != nil {
		t.Fatal(err)
	}
	record := "$KV." + natsbox.RunsBucket + ".r-bob-record"
	rec := h.tap(record)
	for _, s := range []string{"$SYS.REQ.USER.INFO", "$JS.API.INFO", "$JS.API.DIRECT.GET." + natsbox.EventsStream + "." + own} {
		if err := mallory.PublishRequest(s, record, nil); err != nil {
			t.Fatal(err)
		}
	}
	settle(t, mallory)()
	// The operator's delta, after hers: bob's stream shows it, and nothing of hers before it.
	if err := h.conn(h.admin).Publish("reins.delta."+run, []byte(fmt.Sprintf(`{"run_id":%q,"step":"ask","iteration":1,"turn":1,"text":"OPERATOR-SENTINEL"}`, run))); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("bob's event stream ended")
			}
			if strings.Contains(l, "MALLORY-WAS-HERE") {
				t.Errorf("bob's event stream shows mallory's delta: %s", l)
			}
			done = strings.Contains(l, "OPERATOR-SENTINEL")
		case <-deadline:
			t.Fatal("the operator's delta never reached bob's event stream")
		}
	}
	rec.quiet(settle(t, mallory))
	if status, _, body := h.do(attackBobToken, "GET", "/v1/runs/"+run, ""); status != http.StatusOK || !strings.Contains(body, `"waiting`) {
		t.Errorf("bob's run after the attack: %d %s", status, body)
	}
	h.healthy()
}

// TestAttackDurables: vera asks for 200 durable consumers of the events stream (a durable
// outlives her connection and the server's restarts): every one is refused, and none exists.
func TestAttackDurables(t *testing.T) {
	h := hostileServer(t, "")
	vera := h.conn(attackViewerToken)
	const marker = "vera-durable-marker-3c1d"
	for i := range 200 {
		name := fmt.Sprintf("vera-%d", i)
		body := map[string]any{"stream_name": natsbox.EventsStream, "config": map[string]any{"durable_name": name, "description": marker, "ack_policy": "explicit"}}
		desc, err := jsAPI(vera, "$JS.API.CONSUMER.CREATE."+natsbox.EventsStream+"."+name, body)
		if refused(t, "vera's durable "+name, "vera", desc, err); t.Failed() {
			break
		}
	}
	admin, err := jetstream.New(h.conn(h.admin))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := admin.Stream(ctx, natsbox.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	names := s.ConsumerNames(ctx)
	for n := range names.Name() {
		if strings.HasPrefix(n, "vera-") {
			t.Errorf("vera's durable %s exists", n)
		}
	}
	h.healthy()
	h.scan(marker)
}

// TestAttackConsumerCap: within the operator's cap, vera reads runs with reins's own commands
// (watches and ordered consumers through the proxy); past it, a consumer is refused at once with
// the cap named.
func TestAttackConsumerCap(t *testing.T) {
	const limit = 4
	h := hostileServer(t, fmt.Sprintf("\n[limits]\nmax_consumers_per_principal = %d\n", limit))
	h.register(attackBobToken, "nap", napWorkflow)
	run := "r-bob-nap"
	h.startRun(attackBobToken, "nap", run)
	for l := range h.sse(attackBobToken, run) { // until the run's end
		if l == "event: end" {
			break
		}
	}
	as := []string{"--nats", h.nats, "--token", attackViewerToken}
	if out := reins(t, append([]string{"runs", "list"}, as...)...); !strings.Contains(out, run) {
		t.Errorf("reins runs list as vera does not list %s: %s", run, out)
	}
	if out := reins(t, append([]string{"runs", "show", run}, as...)...); !strings.Contains(out, "completed") {
		t.Errorf("reins runs show as vera: %s", out)
	}
	reins(t, append([]string{"runs", "replay", run}, as...)...) // the run's events, read back

	vera := h.conn(attackViewerToken)
	created := 0
	for {
		name := fmt.Sprintf("vera-pull-%d", created)
		pull := map[string]any{"stream_name": natsbox.EventsStream, "config": map[string]any{"name": name, "ack_policy": "none", "inactive_threshold": int64(time.Minute)}}
		desc, err := jsAPI(vera, "$JS.API.CONSUMER.CREATE."+natsbox.EventsStream+"."+name, pull)
		if err != nil {
			t.Fatal(err)
		}
		if desc != "" {
			refused(t, "vera's consumer over the cap", "vera", desc, nil)
			if !strings.Contains(desc, fmt.Sprintf("more than %d consumers", limit)) || !strings.Contains(desc, "max_consumers_per_principal") {
				t.Errorf("the refusal %q does not name the cap (%d, max_consumers_per_principal)", desc, limit)
			}
			break
		}
		if created++; created > limit {
			t.Fatalf("vera created %d consumers, more than the cap of %d", created, limit)
		}
	}
	if created == 0 {
		t.Errorf("vera could create no consumer within the cap of %d", limit)
	}
	h.healthy()
}

// TestAttackWorkerPush: wanda, a worker, asks for a push consumer of the checkpoints she
// writes, delivering to a subject she may not publish on: refused. Her own work goes on: the
// pull consumer of a handler's tasks, and a watch of the checkpoints.
func TestAttackWorkerPush(t *testing.T) {
	h := hostileServer(t, "")
	wanda := h.conn(attackWorkerToken)
	bucket := "KV_" + natsbox.CheckpointsBucket
	target := "reins.cancel.r-bob"
	tp := h.tap(target)
	subject, body := pushConsumer(bucket, "wanda-push", "", target)
	desc, err := jsAPI(wanda, subject, body)
	refused(t, "wanda's push consumer delivering to "+target, "wanda", desc, err)
	tp.quiet(settle(t, wanda))

	js, err := jetstream.New(wanda)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	subject, _ = natsbox.TaskSubject("wanda.echo")
	if _, err := js.CreateOrUpdateConsumer(ctx, natsbox.TasksStream, jetstream.ConsumerConfig{
		Durable: natsbox.WorkerConsumerName("wanda.echo"), FilterSubject: subject, AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Errorf("wanda's consumer of her handler's tasks: %v", err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, natsbox.TasksStream, jetstream.ConsumerConfig{
		Durable: "wanda-squat", FilterSubject: subject, AckPolicy: jetstream.AckExplicitPolicy,
	}); err == nil {
		t.Error("wanda created a durable of the tasks under a name of her choosing")
	}
	kv, err := js.KeyValue(ctx, natsbox.CheckpointsBucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		t.Fatalf("wanda's watch of the checkpoints: %v", err)
	}
	defer w.Stop()
	select {
	case <-w.Updates():
	case <-ctx.Done():
		t.Fatal("wanda's watch of the checkpoints never caught up")
	}
	h.healthy()
}

// TestAttackInboxes: mallory listens on every inbox ("_INBOX.>") while bob writes and reads a
// value, and sends requests whose reply subject is an inbox bob listens on: she sees none of his
// replies, and he gets none of her answers.
func TestAttackInboxes(t *testing.T) {
	h := hostileServer(t, "")
	mallory := h.conn(attackMalloryToken)
	spy, err := mallory.SubscribeSync("_INBOX.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := mallory.Flush(); err != nil {
		t.Fatal(err)
	}
	bob := h.conn(attackBobToken)
	js, err := jetstream.New(bob)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := js.KeyValue(ctx, natsbox.WorkflowsBucket)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "BOB-SECRET-VALUE-71c2"
	if _, err := kv.Put(ctx, "bob-secret", []byte(secret)); err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "bob-secret"); err != nil || string(e.Value()) != secret {
		t.Fatalf("bob reads his value back: %v", err)
	}
	// Her own request last: once answered, bob's replies would have reached her before it.
	reply, err := mallory.Request("$JS.API.INFO", nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := spy.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("mallory's _INBOX.> did not get her own reply: %v", err)
		}
		if m.Subject == reply.Subject {
			break
		}
		if strings.Contains(string(m.Data), secret) || strings.Contains(m.Header.Get("Nats-Subject"), "bob-secret") {
			t.Errorf("mallory's _INBOX.> received bob's reply on %s: %.80q", m.Subject, m.Data)
		}
	}

	// An inbox of bob's, as if she learned its name: answers to her requests never reach it.
	inbox := "_INBOX.bob-known"
	got, err := bob.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := bob.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"$JS.API.INFO", "$SYS.REQ.USER.INFO", "$JS.API.STREAM.INFO." + natsbox.EventsStream} {
		if err := mallory.PublishRequest(s, inbox, nil); err != nil {
			t.Fatal(err)
		}
	}
	if desc, err := jsAPI(mallory, "$JS.API.CONSUMER.CREATE."+natsbox.EventsStream+".mallory-spy", map[string]any{
		"stream_name": natsbox.EventsStream, "config": map[string]any{"name": "mallory-spy", "ack_policy": "none", "deliver_subject": inbox},
	}); err != nil || desc != "" {
		t.Fatalf("mallory's push consumer to an inbox of her own: %q, %v", desc, err)
	}
	settle(t, mallory)()
	// The operator's sentinel reaches bob's inbox the way a delivery for him would.
	sentinel := "sentinel-inbox"
	if err := h.conn(h.admin).Publish("reins.deliver.bob."+inbox, []byte(sentinel)); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := got.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("the operator's sentinel never reached bob's inbox: %v", err)
		}
		if string(m.Data) == sentinel {
			break
		}
		t.Errorf("bob's inbox received an answer to mallory: %.80q", m.Data)
	}
	h.healthy()
}
