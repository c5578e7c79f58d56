//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/natstest"
)

// natsCluster is three nats-server processes clustered with JetStream, each started with
// deploy/nats/node.conf (the file docs/deploy.md gives operators) and its own store.
type natsCluster struct {
	t       testing.TB
	dirs    [3]string
	ports   [3]int // client ports
	cluster [3]int // route ports
	procs   [3]*proc
	url     string // the three client URLs, comma-separated
}

func newNATSCluster(t testing.TB) *natsCluster {
	t.Helper()
	c := &natsCluster{t: t}
	var urls []string
	for i := range 3 {
		c.dirs[i], c.ports[i], c.cluster[i] = t.TempDir(), natstest.FreePort(t), natstest.FreePort(t)
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", c.ports[i]))
	}
	c.url = strings.Join(urls, ",")
	for i := range 3 {
		c.start(i)
	}
	for i := range 3 {
		c.procs[i].waitFor("Server is ready", 30*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	natstest.WaitJetStream(t, ctx, c.url)
	natstest.WaitPlacement(t, ctx, c.url, 3)
	return c
}

// start starts node i (n1, n2, n3) on its store, as a process of the cluster.
func (c *natsCluster) start(i int) {
	c.t.Helper()
	env := []string{
		fmt.Sprintf("NATS_NAME=n%d", i+1),
		fmt.Sprintf("NATS_LISTEN=127.0.0.1:%d", c.ports[i]),
		"NATS_STORE=" + c.dirs[i],
		fmt.Sprintf("NATS_CLUSTER_LISTEN=127.0.0.1:%d", c.cluster[i]),
	}
	for j := range 3 {
		env = append(env, fmt.Sprintf("NATS_ROUTE_%d=nats://127.0.0.1:%d", j+1, c.cluster[j]))
	}
	c.procs[i] = start(c.t, fmt.Sprintf("nats-server n%d", i+1), env, bins.natsServer, "-c", filepath.Join("..", "deploy", "nats", "node.conf"))
}

// leaderOf returns the index of the node that leads stream name.
func (c *natsCluster) leaderOf(ctx context.Context, js jetstream.JetStream, name string) int {
	c.t.Helper()
	s, err := js.Stream(ctx, name)
	if err != nil {
		c.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		c.t.Fatalf("stream %s: %v (cluster %+v)", name, err, info)
	}
	var i int
	if _, err := fmt.Sscanf(info.Cluster.Leader, "n%d", &i); err != nil || i < 1 || i > 3 {
		c.t.Fatalf("stream %s is led by %q, not a node of the cluster", name, info.Cluster.Leader)
	}
	return i - 1
}

// On a three-node cluster, reins serve --replicas 3 makes every stream and bucket R3, and the
// workers (started without --replicas) keep it. SIGKILL of the node that leads the task stream
// in the middle of eight runs loses nothing: every run completes, every iteration dispatched
// once and counted once by the engine. The handlers' done lines are only counted: a task whose
// acknowledgement died with the node runs again, and an answer stored while its publish timed
// out is not seen as stored by its handler.
// The node restarted on its stale store changes nothing: runs started then complete too.
func TestClusterLosesANode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nc := newNATSCluster(t)
	c := &cluster{t: t, url: nc.url, state: t.TempDir()}
	e := start(t, "reins serve", nil, bins.reins, "serve", "--nats", nc.url, "--listen", "127.0.0.1:0", "--no-workers", "--ack-wait", "1s", "--replicas", "3")
	e.waitFor("reins serving", 30*time.Second)
	w1 := loopWorker(t, nc.url, c.state, 0)
	w2 := loopWorker(t, nc.url, c.state, 0)

	box, err := natsbox.Open(ctx, natsbox.Options{URL: nc.url, Name: "e2e-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	js := box.JetStream()
	for _, name := range []string{natsbox.TasksStream, natsbox.EventsStream, natsbox.DLQStream, "KV_" + natsbox.RunsBucket, "KV_" + natsbox.CheckpointsBucket, "KV_" + natsbox.EffectsBucket, "OBJ_" + natsbox.ValuesBucket} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if n := s.CachedInfo().Config.Replicas; n != 3 {
			t.Errorf("%s has %d replicas after reins serve --replicas 3 and two workers, want 3", name, n)
		}
	}

	const runs, until = 8, 15
	var ids []string
	for i := range runs {
		ids = append(ids, c.startRun(fmt.Sprintf("cluster-%d", i), until))
	}
	if !awaitAny([]*proc{w1, w2}, "done "+ids[0]+" 3", 30*time.Second) {
		t.Fatal("the first run made no progress")
	}
	cl := c.client(ctx)
	lost := nc.leaderOf(ctx, js, natsbox.TasksStream)
	nc.procs[lost].kill()
	reran := 0
	for _, id := range ids {
		checkCompleted(t, ctx, cl, id, until)
		for _, n := range doneLines(id, w1, w2) {
			reran += max(n-1, 0)
		}
	}
	// An acknowledgement lost with the node leaves its task to be delivered again; the handler
	// runs again (side effects are kept once by effect leases, e2e/effects_test.go), and the
	// engine still counts the iteration once.
	t.Logf("%d of %d iterations ran again after an acknowledgement lost with the node", reran, runs*until)

	// The node comes back on its store, behind the others: what reins reads there is checked
	// against the leaders, and runs started now complete the same way.
	nc.start(lost)
	nc.procs[lost].waitFor("Server is ready", 30*time.Second)
	var after []string
	for i := range 4 {
		after = append(after, c.startRun(fmt.Sprintf("cluster-after-%d", i), 5))
	}
	for _, id := range after {
		checkCompleted(t, ctx, cl, id, 5)
	}
}
