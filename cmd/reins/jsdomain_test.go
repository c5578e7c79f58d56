package main

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/testkit/natstest"
	"github.com/reins-run/reins/protocol"
)

// TestJSDomainFlag: `reins serve --nats LEAF --js-domain hub` serves on a leaf node through its
// hub's JetStream, and `reins run --nats LEAF --js-domain hub` runs there; the run's events are
// in the hub's JetStream. Without --js-domain, the leaf's own JetStream does not know the run.
func TestJSDomainFlag(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, leaf := natstest.HubAndLeaf(t, t.Context(), "hub", "leaf")
	t.Setenv(tokenEnv, "")
	t.Setenv(namespaceEnv, "")
	stderr := &syncBuffer{}
	done := background(ctx, &syncBuffer{}, stderr, "serve", "--nats", leaf.ClientURL(), "--js-domain", "hub", "--listen", "127.0.0.1:0")
	defer func() {
		cancel()
		if code := awaitExit(t, done, "reins serve"); code != exitOK {
			t.Errorf("serve: exit %d\n%s", code, stderr.String())
		}
	}()
	awaitText(t, stderr, "reins serving", done, "reins serve")

	code, out, errOut := cli(t, "run", refundFile, "--input", refundInput, "--nats", leaf.ClientURL(), "--js-domain", "hub", "--json", "--quiet")
	if code != exitOK {
		t.Fatalf("run --js-domain hub: exit %d\n%s%s", code, out, errOut)
	}
	r := decodeResult(t, out)
	if r.Status != string(protocol.RunCompleted) {
		t.Fatalf("run --js-domain hub: %+v", r)
	}
	if code, out, errOut := cli(t, "runs", "show", r.RunID, "--nats", leaf.ClientURL(), "--js-domain", "hub", "--json"); code != exitOK {
		t.Errorf("runs show --js-domain hub: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, _ := cli(t, "runs", "show", r.RunID, "--nats", leaf.ClientURL(), "--json"); code == exitOK {
		t.Errorf("runs show without --js-domain found the run in the leaf's own JetStream")
	}

	nc, err := nats.Connect(leaf.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	hubJS, err := jetstream.NewWithDomain(nc, "hub")
	if err != nil {
		t.Fatal(err)
	}
	if s, err := hubJS.Stream(t.Context(), "REINS_EVENTS"); err != nil || s.CachedInfo().State.Msgs == 0 {
		t.Errorf("the hub's REINS_EVENTS: %v; want the run's events", err)
	}
}

// TestJSFlagsUsage: --js-domain and --js-api-prefix without --nats, together, or malformed are a
// usage error of one line, on every command that connects to NATS, before it connects.
func TestJSFlagsUsage(t *testing.T) {
	data := t.TempDir()
	const nowhere = "nats://127.0.0.1:1"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", refundFile, "--input", refundInput, "--data", data, "--js-domain", "hub"}, "reins: --js-domain applies to an external server: pass --nats URL too"},
		{[]string{"serve", "--data", data, "--js-api-prefix", "JS.acme.API"}, "reins: --js-api-prefix applies to an external server: pass --nats URL too"},
		{[]string{"runs", "list", "--data", data, "--js-domain", "hub"}, "reins: --js-domain applies to an external server"},
		{[]string{"approve", "r-1", "--data", data, "--js-domain", "hub"}, "reins: --js-domain applies to an external server"},
		{[]string{"signal", "r-1", "go", "--data", data, "--js-domain", "hub"}, "reins: --js-domain applies to an external server"},
		{[]string{"worker", "--nats", nowhere, "--js-domain", "hub", "--js-api-prefix", "JS.acme.API"}, "reins: --js-domain and --js-api-prefix are exclusive"},
		{[]string{"worker", "--nats", nowhere, "--js-domain", "a.b"}, `reins: --js-domain: natsbox: JetStream domain "a.b" is not one subject token`},
		{[]string{"runs", "list", "--nats", nowhere, "--js-api-prefix", "JS.*.API"}, `reins: --js-api-prefix: natsbox: JetStream API prefix "JS.*.API" is not a subject without wildcards`},
		{[]string{"run", refundFile, "--input", refundInput, "--nats", nowhere, "--js-domain", "a b"}, "reins: --js-domain: natsbox: JetStream domain"},
	} {
		t.Run(strings.Join(tc.args[:2], " "), func(t *testing.T) {
			code, out, errOut := cli(t, tc.args...)
			if code != exitUsage || !strings.HasPrefix(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("%v: exit %d, want %d with one line beginning %q\n%s%s", tc.args, code, exitUsage, tc.want, out, errOut)
			}
		})
	}
}
