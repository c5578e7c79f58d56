//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/trigger"
	"github.com/reins-run/reins/workflow"
)

// The attacks on registered names and run ids (docs/security.md, "Promises"): a name belongs
// to whoever registered it first, and the run ids of triggers, sub-runs and forks are the
// server's.

// ownersApprove waits for a person's approval before it ends: bob's workflow.
const ownersApprove = `name = "approve"

[[steps]]
id = "ask"
type = "approval"
prompt = "Refund order {{input.order_id}}?"

[[steps]]
id = "done"
type = "terminate"

[[edges]]
from = "ask"
to = "done"
when = "approved"
`

// ownersNoApproval is mallory's version of approve: it ends at once, approving nothing.
const ownersNoApproval = `name = "approve"

[[steps]]
id = "done"
type = "terminate"
`

// answerOf decodes a JSON answer of the API into a map, failing the test when it is not one.
func answerOf(t *testing.T, what, body string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("%s: the answer is not a JSON object: %v\n%s", what, err, body)
	}
	return m
}

// want fails the test unless status is want, showing the answer.
func want(t *testing.T, what string, status, want int, body string) {
	t.Helper()
	if status != want {
		t.Fatalf("%s: %d, want %d\n%s", what, status, want, body)
	}
}

// runDetail reads GET /v1/runs/{id} as the principal of token, once the run's record is there
// and satisfies ok (polled until the deadline).
func (h *hostile) runDetail(token, id string, ok func(map[string]any) bool) map[string]any {
	h.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		status, _, body := h.do(token, "GET", "/v1/runs/"+id, "")
		if status == http.StatusOK {
			d := answerOf(h.t, "GET /v1/runs/"+id, body)
			if ok(d) {
				return d
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("run %s: no answer as awaited within 60 s: %d %s", id, status, body)
		}
		time.Sleep(50 * time.Millisecond) // polling a real condition with a deadline
	}
}

// registeredAs returns the "registered" member of a run's detail: "NAME vN", or "" without one.
func registeredAs(d map[string]any) string {
	r, _ := d["registered"].(map[string]any)
	if r == nil {
		return ""
	}
	v, _ := r["version"].(float64)
	return fmt.Sprintf("%v v%d", r["name"], int(v))
}

// TestAttackOwnersReplaceWorkflow: mallory cannot register a version of bob's workflow (403
// naming her and bob), so bob's next start by name runs his version, which waits for an
// approval; nor can she name herself a writer, or write the registry's record of who may
// around the API. Once bob names her a writer her version is taken, and an admin's is too.
func TestAttackOwnersReplaceWorkflow(t *testing.T) {
	h := hostileServer(t, "")
	h.register(attackBobToken, "approve", ownersApprove)

	status, _, body := h.do(attackMalloryToken, "PUT", "/v1/workflows/approve", ownersNoApproval, "Content-Type", "application/toml")
	want(t, "mallory's version of bob's workflow", status, http.StatusForbidden, body)
	detail, _ := answerOf(t, "the refusal", body)["detail"].(string)
	if !strings.Contains(detail, "mallory") || !strings.Contains(detail, "bob") || strings.Count(detail, ". ") > 0 {
		t.Errorf("the refusal is not one sentence naming mallory and the owner bob: %q", detail)
	}
	h.healthy()

	// Nor can she make herself a writer, through the API or around it.
	status, _, body = h.do(attackMalloryToken, "PUT", "/v1/workflows/approve/writers", `{"writers": ["mallory"]}`, "Content-Type", "application/json")
	want(t, "mallory naming herself a writer of bob's workflow", status, http.StatusForbidden, body)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, err := jetstream.New(h.conn(attackMalloryToken))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "reins_registry") // submitters read the registry
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = kv.Put(wctx, client.AccessKey("approve"), []byte(`{"name":"approve","owner":"mallory"}`))
	wcancel()
	if err == nil {
		t.Fatal("mallory wrote the registry's access record of approve directly")
	}

	status, _, body = h.do(attackViewerToken, "GET", "/v1/workflows/approve", "")
	want(t, "the workflow", status, http.StatusOK, body)
	wf := answerOf(t, "the workflow", body)
	if wf["version"] != 1.0 || wf["owner"] != "bob" || wf["registered_by"] != "bob" || len(wf["writers"].([]any)) != 0 {
		t.Fatalf("approve after mallory's attempts: %s", body)
	}

	// bob's next start by name runs his version, which waits for the approval.
	status, _, body = h.do(attackBobToken, "POST", "/v1/runs", `{"workflow": "approve", "input": {"order_id": "A-1"}}`)
	if status != http.StatusCreated && status != http.StatusAccepted {
		t.Fatalf("bob's start: %d %s", status, body)
	}
	started := answerOf(t, "bob's start", body)
	if started["version"] != 1.0 {
		t.Fatalf("bob's start ran version %v: %s", started["version"], body)
	}
	id := started["run_id"].(string)
	d := h.runDetail(attackBobToken, id, func(d map[string]any) bool { return d["status"] == "waiting" || d["status"] == "completed" })
	if d["status"] != "waiting" || registeredAs(d) != "approve v1" {
		t.Fatalf("bob's run is %v, registered as %q, want waiting for approval as approve v1", d["status"], registeredAs(d))
	}

	// bob names mallory a writer: her version is taken; an admin's is too.
	status, _, body = h.do(attackBobToken, "PUT", "/v1/workflows/approve/writers", `{"writers": ["mallory"]}`, "Content-Type", "application/json")
	want(t, "bob naming mallory a writer", status, http.StatusOK, body)
	status, _, body = h.do(attackMalloryToken, "PUT", "/v1/workflows/approve", ownersNoApproval, "Content-Type", "application/toml")
	want(t, "mallory's version once a writer", status, http.StatusCreated, body)
	if v := answerOf(t, "mallory's version", body); v["version"] != 2.0 || v["registered_by"] != "mallory" || v["owner"] != "bob" {
		t.Fatalf("mallory's version: %s", body)
	}
	status, _, body = h.do(h.admin, "PUT", "/v1/workflows/approve", strings.Replace(ownersApprove, "Refund", "Really refund", 1), "Content-Type", "application/toml")
	want(t, "an admin's version", status, http.StatusCreated, body)
	if v := answerOf(t, "the admin's version", body); v["version"] != 3.0 || v["registered_by"] != "admin" {
		t.Fatalf("the admin's version: %s", body)
	}
	h.healthy()
}

// ordersHookSecret is the operator's secret of the webhook orders.
const ordersHookSecret = "orders-hook-secret-9a8b7c6d5e4f"

// ownersIntake starts on every delivery of the webhook orders, and on a yearly schedule.
const ownersIntake = `name = "intake"

[[steps]]
id = "done"
type = "terminate"

[[triggers]]
name = "on-order"
webhook = "orders"

[[triggers]]
name = "yearly"
schedule = "0 0 1 1 *"
`

// TestAttackOwnersTriggerRunIDs: mallory cannot start a run under the id bob's trigger will
// use (a webhook delivery's, a schedule's due time), nor under a sub-run's or a fork's: 400
// naming the rule, through the API and through reins's client; the signed delivery then
// starts bob's run, not an "existing" one of hers.
func TestAttackOwnersTriggerRunIDs(t *testing.T) {
	h := hostileServer(t, "\n[webhooks.orders]\nsecret_env = \"ORDERS_HOOK_SECRET\"\n", "ORDERS_HOOK_SECRET="+ordersHookSecret)
	h.register(attackBobToken, "intake", ownersIntake)
	hookID := trigger.RunID("webhook", "intake", "on-order", "delivery-1")
	sch, err := workflow.ParseSchedule("0 0 1 1 *", "")
	if err != nil {
		t.Fatal(err)
	}
	dueID := trigger.RunID("schedule", "intake", "yearly", trigger.DueKey(sch.Next(time.Now())))
	for _, c := range []struct{ what, id, rule string }{
		{"the webhook delivery's run id", hookID, "t-"},
		{"the next due time's run id", dueID, "t-"},
		{"a trigger-shaped id", "t-on-order-aaaaaaaaaaaaaaaaaaaa", "t-"},
		{"a fork-shaped id", "bob-run-fork-1", "fork"},
		{"a sub-run-shaped id", "bob-run/ask/1", "/"},
	} {
		body := `{"workflow": "intake", "input": {"order": "forged"}, "run_id": "` + c.id + `"}`
		status, _, ans := h.do(attackMalloryToken, "POST", "/v1/runs", body)
		want(t, "mallory's start with "+c.what, status, http.StatusBadRequest, ans)
		if detail, _ := answerOf(t, c.what, ans)["detail"].(string); !strings.Contains(detail, "run_id") || !strings.Contains(detail, c.rule) {
			t.Errorf("%s: the 400 does not name the member and the rule (%q): %q", c.what, c.rule, detail)
		}
	}
	// Past the API: reins's own client refuses it too, before anything is sent.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, mallory := h.client(ctx, attackMalloryToken)
	def, ps := workflow.Parse("intake.toml", []byte(ownersIntake))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	def.Normalize()
	bs, err := workflow.NewBundles(def, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mallory.Start(ctx, bs, nil, hookID); err == nil || !strings.Contains(err.Error(), "t-") {
		t.Fatalf("client.Start with a trigger's run id: %v", err)
	}
	h.healthy()

	// The signed delivery starts bob's run (once the server's triggers have read the
	// registration: until then a delivery is 404 and starts nothing, so it is sent again).
	payload := `{"order": "O-1"}`
	status, body := 0, ""
	for deadline := time.Now().Add(30 * time.Second); ; {
		status, _, body = h.do("", "POST", "/v1/hooks/orders", payload,
			trigger.SignatureHeader, trigger.Sign([]byte(ordersHookSecret), []byte(payload)), trigger.DeliveryHeader, "delivery-1")
		if status != http.StatusNotFound || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling a real condition with a deadline
	}
	want(t, "the signed delivery", status, http.StatusAccepted, body)
	var ans struct {
		Runs []trigger.Started `json:"runs"`
	}
	if err := json.Unmarshal([]byte(body), &ans); err != nil || len(ans.Runs) != 1 {
		t.Fatalf("the delivery's answer: %v %s", err, body)
	}
	if r := ans.Runs[0]; r.RunID != hookID || r.Existing || r.Workflow != "intake" || r.Version != 1 {
		t.Fatalf("the delivery started %+v, want run %s of intake v1, not existing", r, hookID)
	}
	d := h.runDetail(attackBobToken, hookID, func(d map[string]any) bool { return d["status"] == "completed" })
	trace, _ := json.Marshal(d["trace"])
	if input, _ := json.Marshal(d["trace"].([]any)[0].(map[string]any)["input"]); !strings.Contains(string(input), "O-1") || registeredAs(d) != "intake v1" || strings.Contains(string(trace), `"by":"mallory"`) {
		t.Fatalf("the delivery's run: input %s, registered as %q", input, registeredAs(d))
	}
}

// TestAttackOwnersTakeRunID: mallory's start with the run_id of bob's run is 409, and the
// answer holds nothing of bob's run (not its workflow, version or input); bob's own retry is
// still answered 200 with his run.
func TestAttackOwnersTakeRunID(t *testing.T) {
	h := hostileServer(t, "")
	h.register(attackBobToken, "approve", ownersApprove)
	const secretOrder = "bob-private-order-31337"
	bobStart := `{"workflow": "approve", "input": {"order_id": "` + secretOrder + `"}, "run_id": "bob-refund-1"}`
	status, _, body := h.do(attackBobToken, "POST", "/v1/runs", bobStart)
	if status != http.StatusCreated && status != http.StatusAccepted {
		t.Fatalf("bob's start: %d %s", status, body)
	}
	for _, c := range []struct{ what, body string }{
		{"the same workflow", `{"workflow": "approve", "input": {"order_id": "x"}, "run_id": "bob-refund-1"}`},
		{"bob's very request", bobStart},
	} {
		status, _, ans := h.do(attackMalloryToken, "POST", "/v1/runs", c.body)
		want(t, "mallory's start with bob's run id, "+c.what, status, http.StatusConflict, ans)
		m := answerOf(t, c.what, ans)
		if strings.Contains(ans, secretOrder) || m["version"] != nil || m["workflow"] != nil || !strings.Contains(m["detail"].(string), "bob-refund-1") {
			t.Errorf("mallory's 409 (%s) shows something of bob's run, or names no run: %s", c.what, ans)
		}
	}
	status, _, body = h.do(attackBobToken, "POST", "/v1/runs", bobStart)
	want(t, "bob's retry", status, http.StatusOK, body)
	if m := answerOf(t, "bob's retry", body); m["run_id"] != "bob-refund-1" || m["version"] != 1.0 {
		t.Fatalf("bob's retry: %s", body)
	}
	h.healthy()
}

// TestAttackOwnersPinnedVersion: a start that pins a version runs that version, though a later
// one is the latest, and the run says which (GET /v1/runs/{id}, reins runs show); a start
// whose claim of a registered version is false is shown with none.
func TestAttackOwnersPinnedVersion(t *testing.T) {
	h := hostileServer(t, "")
	h.register(attackBobToken, "approve", ownersApprove)
	h.register(attackBobToken, "approve", ownersNoApproval)
	status, _, body := h.do(attackBobToken, "POST", "/v1/runs", `{"workflow": "approve", "version": 1, "input": {"order_id": "P-1"}, "run_id": "pinned-1"}`)
	if status != http.StatusCreated && status != http.StatusAccepted {
		t.Fatalf("a pinned start: %d %s", status, body)
	}
	if m := answerOf(t, "a pinned start", body); m["version"] != 1.0 {
		t.Fatalf("a pinned start answers version %v", m["version"])
	}
	d := h.runDetail(attackViewerToken, "pinned-1", func(d map[string]any) bool { return d["status"] == "waiting" || d["status"] == "completed" })
	if d["status"] != "waiting" || registeredAs(d) != "approve v1" {
		t.Fatalf("the pinned run is %v as %q, want waiting as approve v1", d["status"], registeredAs(d))
	}
	out := reins(t, "runs", "show", "pinned-1", "--server", h.base, "--token", attackViewerToken)
	if !strings.Contains(out, "registered: approve version 1") {
		t.Errorf("reins runs show does not say which version ran:\n%s", out)
	}
	js := reins(t, "runs", "show", "pinned-1", "--server", h.base, "--token", attackViewerToken, "--json")
	if !strings.Contains(js, `"registered"`) {
		t.Errorf("reins runs show --json does not say which version ran:\n%s", js)
	}
	status, _, body = h.do(attackBobToken, "POST", "/v1/runs", `{"workflow": "approve", "input": {"order_id": "P-2"}, "run_id": "latest-1"}`)
	if status != http.StatusCreated && status != http.StatusAccepted {
		t.Fatalf("a start of the latest: %d %s", status, body)
	}
	d = h.runDetail(attackViewerToken, "latest-1", func(d map[string]any) bool { return d["status"] == "completed" })
	if registeredAs(d) != "approve v2" {
		t.Fatalf("the latest's run is registered as %q, want approve v2", registeredAs(d))
	}

	// mallory starts her own definition through NATS claiming to run bob's approve v1: the run
	// is shown with no registered version.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, mallory := h.client(ctx, attackMalloryToken)
	def, ps := workflow.Parse("fake.toml", []byte(strings.Replace(ownersNoApproval, `"approve"`, `"fake"`, 1)))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	def.Normalize()
	bs, err := workflow.NewBundles(def, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mallory.StartWith(ctx, bs, nil, client.StartOptions{RunID: "claims-1", Registered: &client.Registered{Name: "approve", Version: 1}}); err != nil && !errors.Is(err, client.ErrExists) {
		t.Fatal(err)
	}
	d = h.runDetail(attackViewerToken, "claims-1", func(d map[string]any) bool { return d["status"] == "completed" })
	if registeredAs(d) != "" {
		t.Fatalf("a run whose start claims a version it does not run is shown as %q", registeredAs(d))
	}
}
