//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/protocol"
)

// composeFile is what TestComposeCommands reads of deploy/container/compose.yaml.
type composeFile struct {
	Services map[string]struct {
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Deploy      struct {
			Replicas int `yaml:"replicas"`
		} `yaml:"deploy"`
	} `yaml:"services"`
}

// The compose file runs what docs/deploy.md describes, and no Docker engine runs here to try
// it: so this test runs its commands. The NATS nodes n1, n2 and n3 are the cluster of the
// other cluster tests, from the same node.conf and the same environment variables as the
// file's; the reins services are started with the file's own commands, their n1..n3 URLs
// pointed at those nodes, as many workers as its replicas; then a run of the research example
// completes through them.
func TestComposeCommands(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "deploy", "container", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(data, &cf); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		env := cf.Services[n].Environment
		var keys []string
		for k := range env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		// natsCluster.start sets these for each node.
		want := []string{"NATS_CLUSTER_LISTEN", "NATS_LISTEN", "NATS_NAME", "NATS_ROUTE_1", "NATS_ROUTE_2", "NATS_ROUTE_3", "NATS_STORE"}
		if !slices.Equal(keys, want) || env["NATS_NAME"] != n {
			t.Fatalf("service %s sets %v (NATS_NAME %q), want %v as the cluster test's nodes", n, keys, env["NATS_NAME"], want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nc := newNATSCluster(t)
	urls := strings.Split(nc.url, ",")
	// Each container has its own 7400; processes on one machine take a port each.
	local := strings.NewReplacer("nats://n1:4222", urls[0], "nats://n2:4222", urls[1], "nats://n3:4222", urls[2], "0.0.0.0:7400", "127.0.0.1:0")
	started := 0
	for _, name := range []string{"engine-1", "engine-2", "worker"} {
		svc, ok := cf.Services[name]
		if !ok || len(svc.Command) == 0 {
			t.Fatalf("compose.yaml has no command for service %s", name)
		}
		args := make([]string, len(svc.Command))
		for i, a := range svc.Command {
			args[i] = local.Replace(a)
		}
		ready := "reins serving"
		if args[0] == "worker" {
			ready = "reins worker serving"
		}
		for range max(svc.Deploy.Replicas, 1) {
			p := start(t, "compose "+name, nil, append([]string{bins.reins}, args...)...)
			p.waitFor(ready, 60*time.Second)
			started++
		}
	}
	if started != 4 {
		t.Fatalf("%d reins processes, want the two engines and two workers of docs/deploy.md", started)
	}
	id := reins(t, "run", filepath.Join("..", "examples", "research", "workflow.toml"), "--nats", nc.url, "--detach",
		"--input", `{"question":"automated refunds"}`)
	rec, err := (&cluster{t: t, url: nc.url}).client(ctx).Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Run.Status != protocol.RunCompleted {
		t.Fatalf("run %s: %s (%v), want completed", id, rec.Run.Status, rec.Run.Error)
	}
	var joined []builtin.AgentOutput
	if err := json.Unmarshal(rec.Run.Steps["research"].Output, &joined); err != nil || len(joined) != 3 {
		t.Errorf("research output %s, want the three agents' outputs", rec.Run.Steps["research"].Output)
	}
}
