package main

import (
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/protocol"
)

// TestNamespaceRoundTrip: `reins serve --namespace x` serves namespace x: `reins run
// --namespace x` runs there and `runs list` in x finds the run, while the default namespace of
// the same server has none; $REINS_NAMESPACE stands for the flag.
func TestNamespaceRoundTrip(t *testing.T) {
	data := t.TempDir()
	srv := startServe(t, data, "--namespace", "x")
	if !strings.Contains(srv.stderr.String(), "namespace=x") {
		t.Errorf("serve does not log its namespace:\n%s", srv.stderr.String())
	}
	code, out, errOut := cli(t, "run", refundFile, "--input", refundInput, "--nats", srv.url, "--namespace", "x", "--json", "--quiet")
	if code != exitOK {
		t.Fatalf("run --namespace x: exit %d\n%s%s", code, out, errOut)
	}
	r := decodeResult(t, out)
	if r.Status != string(protocol.RunCompleted) {
		t.Fatalf("run --namespace x: %+v", r)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  string
		want int
	}{
		{"flag", []string{"--nats", srv.url, "--namespace", "x"}, "", 1},
		{"env", []string{"--nats", srv.url}, "x", 1},
		{"data dir and flag", []string{"--data", data, "--namespace", "x"}, "", 1},
		{"default namespace", []string{"--nats", srv.url}, "", 0},
		{"another namespace", []string{"--nats", srv.url, "--namespace", "y"}, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(namespaceEnv, tc.env)
			got := listRuns(t, tc.args...)
			if len(got) != tc.want {
				t.Errorf("runs list %v: %d runs, want %d", tc.args, len(got), tc.want)
			}
		})
	}
	code, out, errOut = cli(t, "runs", "show", r.RunID, "--nats", srv.url, "--namespace", "x", "--json")
	if code != exitOK {
		t.Errorf("runs show --namespace x: exit %d\n%s%s", code, out, errOut)
	}
	// The server holds both namespaces' layouts: x's, made by serve, and the default's, made
	// by the client that listed it.
	box, err := natsbox.Open(t.Context(), natsbox.Options{URL: srv.url, Token: srv.token})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	if _, err := box.JetStream().Stream(t.Context(), "x_REINS_TASKS"); err != nil {
		t.Errorf("namespace x's task stream: %v", err)
	}
	if code := srv.stop(t); code != exitOK {
		t.Fatalf("serve: exit %d\n%s", code, srv.stderr.String())
	}
}

// TestNamespaceUsage: a bad --namespace (or $REINS_NAMESPACE) is a usage error of one line, on
// every command that connects to NATS, before it connects.
func TestNamespaceUsage(t *testing.T) {
	data := t.TempDir()
	for _, tc := range []struct {
		args []string
		env  string
	}{
		{args: []string{"run", refundFile, "--input", refundInput, "--data", data, "--namespace", "Bad"}},
		{args: []string{"serve", "--data", data, "--namespace", "a.b"}},
		{args: []string{"worker", "--nats", "nats://127.0.0.1:1", "--namespace", "-x"}},
		{args: []string{"runs", "list", "--data", data, "--namespace", "Bad"}},
		{args: []string{"runs", "list", "--data", data}, env: "no spaces"},
		{args: []string{"approve", "r-1", "--data", data, "--namespace", "Bad"}},
		{args: []string{"signal", "r-1", "go", "--data", data, "--namespace", "Bad"}},
	} {
		t.Run(strings.Join(tc.args[:2], " "), func(t *testing.T) {
			t.Setenv(namespaceEnv, tc.env)
			code, out, errOut := cli(t, tc.args...)
			if code != exitUsage || !strings.HasPrefix(errOut, "reins: --namespace: natsbox: namespace ") ||
				!strings.Contains(errOut, "is not a valid namespace") || strings.Count(errOut, "\n") != 1 {
				t.Errorf("%v: exit %d, want %d with one line naming the namespace\n%s%s", tc.args, code, exitUsage, out, errOut)
			}
		})
	}
}
