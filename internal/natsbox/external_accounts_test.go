package natsbox

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox/serverspec"
	"github.com/reins-run/reins/internal/testkit/natstest"
)

// accountsConf renders, in a nats-server configuration's syntax, the account REINS (JetStream,
// the user reins, the exports of n) and an account per principal of ids (its user, named
// after it, password "pw", with the permissions of its roles, and its imports): what
// docs/deploy.md asks of an external server's operator ("Principals that distrust each other").
func accountsConf(n Names, ids ...Identity) string {
	var b strings.Builder
	b.WriteString("accounts: {\n  REINS: {\n    users: [{user: reins, password: pw}]\n    jetstream: enabled\n    exports: [\n")
	b.WriteString(exportsConf(n))
	b.WriteString("    ]\n  }\n")
	for _, id := range ids {
		acct := n.PrincipalAccount(id)
		p := n.Permissions(id)
		fmt.Fprintf(&b, "  %q: {\n    users: [{user: %q, password: pw, permissions: {publish: {allow: %s, deny: %s}, subscribe: {allow: %s}}}]\n    imports: [\n",
			acct.Name, id.Name, quoted(p.PublishAllow), quoted(p.PublishDeny), quoted(p.SubscribeAllow))
		for _, im := range acct.Imports {
			fmt.Fprintf(&b, "      %s\n", importConf(im))
		}
		b.WriteString("    ]\n  }\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// exportsConf renders the exports of the account REINS, one a line.
func exportsConf(n Names) string {
	var b strings.Builder
	for _, e := range n.Exports() {
		switch {
		case e.Stream:
			fmt.Fprintf(&b, "      {stream: %q}\n", e.Subject)
		case e.Streamed:
			fmt.Fprintf(&b, "      {service: %q, response_type: stream}\n", e.Subject)
		default:
			fmt.Fprintf(&b, "      {service: %q}\n", e.Subject)
		}
	}
	return b.String()
}

func importConf(im serverspec.Import) string {
	kind, remote := "service", im.Remote
	if im.Stream {
		kind = "stream"
	}
	if remote == "" {
		return fmt.Sprintf("{%s: {account: REINS, subject: %q}}", kind, im.Local)
	}
	return fmt.Sprintf("{%s: {account: REINS, subject: %q}, to: %q}", kind, remote, im.Local)
}

func quoted(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// TestExternalAccounts: on an external server set up as docs/deploy.md says (an account per
// principal importing from reins's), a serve process's ServeConsumerProxy serves the
// principals: a viewer watches run records and reads the events; its push consumer to another
// subject is refused naming it; its answers stay in its account.
func TestExternalAccounts(t *testing.T) {
	val := Identity{Name: "val", Roles: []string{RoleViewer}}
	url := natstest.StartAccounts(t, accountsConf(Names{}, val))
	ctx := testCtx(t)
	reins := open(t, Options{URL: url("reins:pw")})
	if err := EnsureLayout(ctx, reins.JetStream(), reins.Layout()); err != nil {
		t.Fatal(err)
	}
	stop, err := ServeConsumerProxy(ctx, reins, ProxyConfig{Principal: func(name string) (Identity, bool) { return val, name == "val" }})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	runs, err := reins.JetStream().KeyValue(ctx, RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runs.Put(ctx, "r-1", []byte(`{"run":1}`)); err != nil {
		t.Fatal(err)
	}

	v := open(t, Options{URL: url("val:pw")})
	if name, _, err := v.WhoAmI(ctx); err != nil || name != "val" {
		t.Fatalf("WhoAmI: %q, %v", name, err)
	}
	kv, err := v.JetStream().KeyValue(ctx, RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		t.Fatalf("val's watch: %v", err)
	}
	if e := <-w.Updates(); e == nil || string(e.Value()) != `{"run":1}` {
		t.Errorf("val's watch saw %v first", e)
	}
	_ = w.Stop()
	if _, err := v.JetStream().OrderedConsumer(ctx, EventsStream, jetstream.OrderedConsumerConfig{}); err != nil {
		t.Errorf("val's ordered consumer of the events: %v", err)
	}
	got := apiAnswer(t, v, "$JS.API.CONSUMER.CREATE."+EventsStream+".x", map[string]any{"stream_name": EventsStream,
		"config": map[string]any{"name": "x", "deliver_subject": "reins.cancel.r-1", "ack_policy": "none"}})
	if !strings.Contains(got, "principal val may not create a push consumer") {
		t.Errorf("val's push consumer to reins.cancel.r-1: %q", got)
	}
	sub, err := reins.Conn().SubscribeSync("reins.delta.r-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := reins.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := v.Conn().PublishRequest("$JS.API.DIRECT.GET.KV_"+RunsBucket+".$KV."+RunsBucket+".r-1", "reins.delta.r-1", nil); err != nil {
		t.Fatal(err)
	}
	awaitQuiet(t, reins, v, sub, "reins.delta.r-1")
}
