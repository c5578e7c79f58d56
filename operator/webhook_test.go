package operator_test

import (
	"strings"
	"testing"

	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/workflow"
)

// TestWebhooks: [webhooks.NAME] loads with its secret's source, the secret is read at start
// and never shown, and a bad table names its key.
func TestWebhooks(t *testing.T) {
	cfg, err := operator.Parse("ops.toml", []byte("[webhooks.refunds]\nsecret_env = \"REFUNDS_HOOK_SECRET\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := cfg.Resolve(func(k string) string {
		if k == "REFUNDS_HOOK_SECRET" {
			return "s3cret-value"
		}
		return ""
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := res.WebhookSecret("refunds"); !ok || string(s) != "s3cret-value" {
		t.Fatalf("secret %q %v", s, ok)
	}
	if _, ok := res.WebhookSecret("other"); ok {
		t.Fatal("an unknown hook has a secret")
	}
	if strings.Contains(res.String(), "s3cret") {
		t.Fatalf("the resolved configuration shows the secret: %s", res)
	}
	if _, err := cfg.Resolve(func(string) string { return "" }, nil); err == nil || !strings.Contains(err.Error(), "webhooks.refunds.secret_env: the environment variable REFUNDS_HOOK_SECRET is not set") {
		t.Fatalf("unset secret: %v", err)
	}
	for src, want := range map[string]string{
		"[webhooks.refunds]\n": "ops.toml:1: key webhooks.refunds: missing a secret",
		"[webhooks.refunds]\nsecret_env = \"A\"\nsecret_file = \"f\"\n": "ops.toml:1: key webhooks.refunds: set secret_env or secret_file, not both",
		"[webhooks.refunds]\nsecret = \"inline\"\n":                     "ops.toml:2: key webhooks.refunds.secret: unknown key (known: secret_env, secret_file)",
		"[webhooks.Refunds]\nsecret_env = \"A\"\n":                      "ops.toml:1: key webhooks.Refunds: a name is 1 to 64 characters of [a-z0-9_-]",
	} {
		_, err := operator.Parse("ops.toml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", src, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "inline") {
			t.Errorf("the problem quotes the value: %v", err)
		}
	}
}

// TestCheckWorkflowTriggers: a webhook trigger names a hook the operator opened; a subject
// trigger is refused on a server.
func TestCheckWorkflowTriggers(t *testing.T) {
	cfg, err := operator.Parse("ops.toml", []byte("[webhooks.refunds]\nsecret_env = \"S\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	src := "name = \"w\"\n[[steps]]\nid = \"a\"\ntype = \"task\"\nhandler = \"h\"\n[[triggers]]\nname = \"ok\"\nwebhook = \"refunds\"\n[[triggers]]\nname = \"nope\"\nwebhook = \"payouts\"\n[[triggers]]\nname = \"msgs\"\nsubject = \"orders.created\"\n[[triggers]]\nname = \"s\"\nschedule = \"@daily\"\n"
	def, ps := workflow.Parse("w.toml", []byte(src))
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	var got []string
	for _, p := range operator.CheckWorkflow(cfg, def) {
		got = append(got, string(p.Code)+" "+p.Key)
	}
	want := []string{"E_UNKNOWN_WEBHOOK triggers[1].webhook", "E_SUBJECT_NOT_ALLOWED triggers[2].subject"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("problems %q, want %q", got, want)
	}
	// Allowed by the operator: within one of its patterns.
	cfg, err = operator.Parse("ops.toml", []byte("[webhooks.refunds]\nsecret_env = \"S\"\n[webhooks.payouts]\nsecret_env = \"P\"\n[triggers]\nsubjects = [\"billing.*\", \"orders.>\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if ps := operator.CheckWorkflow(cfg, def); len(ps) > 0 {
		t.Fatalf("allowed: %v", ps)
	}
	def.Triggers[2].Subject = "billing.eu.created"
	if ps := operator.CheckWorkflow(cfg, def); len(ps) != 1 || ps[0].Code != operator.ESubjectNotAllowed {
		t.Fatalf("billing.eu.created is not within billing.*: %v", ps)
	}
	// The operator cannot allow reins's own subjects or the server's.
	for _, s := range []string{">", "reins.>", "$KV.>", "acme.reins.>", "*.x"} {
		if _, err := operator.Parse("ops.toml", []byte("[triggers]\nsubjects = [\""+s+"\"]\n")); err == nil || !strings.Contains(err.Error(), "ops.toml:2: key triggers.subjects[0]") {
			t.Errorf("[triggers] subjects = [%q]: %v", s, err)
		}
	}
}
