package api_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/trigger"
)

const hookWorkflow = `name = "refund"
[[steps]]
id = "done"
type = "terminate"
[[triggers]]
name = "on-refund"
webhook = "refunds"
`

// TestHooks: a signed delivery starts a run with its body as input, once per delivery id;
// a bad or missing signature gets 401 and starts nothing; an unknown hook 404; a body over
// Config.MaxWebhookBytes 413; a body that is not I-JSON 400; JSON that is not an object, or
// nests too deep, 422. The secret is never echoed.
func TestHooks(t *testing.T) {
	const secret = "hook-secret-value"
	s := newStackWith(t, stackOptions{Hooks: map[string]string{"refunds": secret, "quiet": "other-secret"}})
	s.as("submitter", "PUT", "/v1/workflows/refund", hookWorkflow).want(t, http.StatusCreated, "register")
	body := `{"order_id": "O-9", "amount": 12}`
	sig := trigger.Sign([]byte(secret), []byte(body))
	post := func(path, body string, header map[string]string) answer {
		a := s.doWith("POST", path, "", body, header)
		if strings.Contains(string(a.Body), secret) {
			t.Fatalf("the answer echoes the secret: %s", a.Body)
		}
		return a
	}
	a := post("/v1/hooks/refunds", body, map[string]string{trigger.SignatureHeader: sig, trigger.DeliveryHeader: "d-1"}).want(t, http.StatusAccepted, "delivery")
	var ans api.HookAnswer
	a.JSON(t, &ans)
	if len(ans.Runs) != 1 || ans.Runs[0].Workflow != "refund" || ans.Runs[0].Trigger != "on-refund" || ans.Runs[0].Existing {
		t.Fatalf("answer %+v", ans)
	}
	id := ans.Runs[0].RunID
	rec := s.wait(id)
	if got := string(rec.Run.Input); !strings.Contains(got, `"order_id":"O-9"`) && !strings.Contains(got, `"order_id": "O-9"`) {
		t.Fatalf("the run's input is %s", got)
	}
	// The same delivery again: the same run, nothing new.
	post("/v1/hooks/refunds", body, map[string]string{trigger.SignatureHeader: sig, trigger.DeliveryHeader: "d-1"}).want(t, http.StatusAccepted, "again").JSON(t, &ans)
	if ans.Runs[0].RunID != id || !ans.Runs[0].Existing {
		t.Fatalf("a retried delivery: %+v", ans)
	}
	deep := `{"x": ` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`
	for _, c := range []struct {
		name, path, body string
		header           map[string]string
		status           int
	}{
		{"no signature", "/v1/hooks/refunds", body, map[string]string{trigger.DeliveryHeader: "d-2"}, http.StatusUnauthorized},
		{"wrong secret", "/v1/hooks/refunds", body, map[string]string{trigger.SignatureHeader: trigger.Sign([]byte("guess"), []byte(body)), trigger.DeliveryHeader: "d-3"}, http.StatusUnauthorized},
		{"another body", "/v1/hooks/refunds", `{"order_id": "O-10"}`, map[string]string{trigger.SignatureHeader: sig, trigger.DeliveryHeader: "d-4"}, http.StatusUnauthorized},
		{"a bearer token is no signature", "/v1/hooks/refunds", body, map[string]string{"Authorization": "Bearer " + s.Tokens["admin"], trigger.DeliveryHeader: "d-5"}, http.StatusUnauthorized},
		{"unknown hook", "/v1/hooks/payouts", body, map[string]string{trigger.SignatureHeader: sig}, http.StatusNotFound},
		{"nobody listens", "/v1/hooks/quiet", body, map[string]string{trigger.SignatureHeader: trigger.Sign([]byte("other-secret"), []byte(body))}, http.StatusNotFound},
		{"not an object", "/v1/hooks/refunds", `[1]`, map[string]string{trigger.SignatureHeader: trigger.Sign([]byte(secret), []byte(`[1]`))}, http.StatusUnprocessableEntity},
		{"too large", "/v1/hooks/refunds", `{"x": "` + strings.Repeat("a", testMaxWebhook) + `"}`, map[string]string{trigger.SignatureHeader: sig}, http.StatusRequestEntityTooLarge},
		{"not JSON", "/v1/hooks/refunds", `{"x": `, map[string]string{trigger.SignatureHeader: trigger.Sign([]byte(secret), []byte(`{"x": `))}, http.StatusBadRequest},
		{"a member twice", "/v1/hooks/refunds", `{"x": 1, "x": 2}`, map[string]string{trigger.SignatureHeader: trigger.Sign([]byte(secret), []byte(`{"x": 1, "x": 2}`))}, http.StatusBadRequest},
		{"too deep", "/v1/hooks/refunds", deep, map[string]string{trigger.SignatureHeader: trigger.Sign([]byte(secret), []byte(deep))}, http.StatusUnprocessableEntity},
		{"not a signature", "/v1/hooks/refunds", body, map[string]string{trigger.SignatureHeader: "sha256=xyz"}, http.StatusUnauthorized},
	} {
		post(c.path, c.body, c.header).want(t, c.status, c.name)
	}
	// Nothing but the first delivery started a run of the workflow.
	page := s.as("viewer", "GET", "/v1/runs?workflow=refund", "").want(t, http.StatusOK, "list")
	if n := strings.Count(string(page.Body), `"run_id"`); n != 1 {
		t.Fatalf("%d runs of refund, want 1: %s", n, page.Body)
	}
}

// TestTriggerAttacks: a submitted workflow cannot listen on reins's own subjects or the
// server's, nor on a subject the operator does not allow, nor on a hook the operator did not
// open: registration is refused with the problem's code, at its line.
func TestTriggerAttacks(t *testing.T) {
	s := newStackWith(t, stackOptions{Hooks: map[string]string{"refunds": "k"}})
	head := "name = \"spy\"\n[[steps]]\nid = \"done\"\ntype = \"terminate\"\n[[triggers]]\nname = \"t\"\n"
	for _, c := range []struct{ body, want string }{
		{"subject = \"reins.event.>\"\n", "E_BAD_SUBJECT triggers[0].subject 7"},
		{"subject = \"acme.reins.task.>\"\n", "E_BAD_SUBJECT triggers[0].subject 7"},
		{"subject = \"$KV.reins_runs.>\"\n", "E_BAD_SUBJECT triggers[0].subject 7"},
		{"subject = \"_INBOX.>\"\n", "E_BAD_SUBJECT triggers[0].subject 7"},
		{"subject = \"*.>\"\n", "E_BAD_SUBJECT triggers[0].subject 7"},
		{"subject = \"orders.created\"\n", "E_SUBJECT_NOT_ALLOWED triggers[0].subject 7"},
		{"webhook = \"payouts\"\n", "E_UNKNOWN_WEBHOOK triggers[0].webhook 7"},
		{"schedule = \"* * * *\"\n", "E_BAD_SCHEDULE triggers[0].schedule 7"},
	} {
		a := s.as("submitter", "PUT", "/v1/workflows/spy", head+c.body).want(t, http.StatusUnprocessableEntity, c.body)
		p := a.problem(t)
		if len(p.Problems) != 1 {
			t.Fatalf("%s: problems %+v", c.body, p.Problems)
		}
		if got := p.Problems[0].Code + " " + p.Problems[0].Key + " " + strconv.Itoa(p.Problems[0].Line); got != c.want {
			t.Errorf("%s: %s, want %s", c.body, got, c.want)
		}
	}
}
