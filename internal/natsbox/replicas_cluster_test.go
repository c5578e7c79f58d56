//go:build e2e

package natsbox

// A cluster of three servers in this process. A heavy test, under the build tag e2e:
// go test -tags e2e ./internal/natsbox -run TestReplicasOnACluster.

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/testkit/natstest"
)

// startCluster starts n real nats-servers with JetStream in this process, clustered by routes
// to the first, and returns their client URLs joined by commas, once the cluster has a
// JetStream meta leader and places streams of n replicas.
func startCluster(t *testing.T, n int) string {
	t.Helper()
	// A clustered JetStream server needs its routes from the start: the cluster ports are
	// chosen first, and every server routes to all of them.
	ports := make([]int, n)
	var routes []string
	for i := range ports {
		ports[i] = natstest.FreePort(t)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	var servers []*server.Server
	for i := range n {
		ns, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: server.RANDOM_PORT,
			JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
			Cluster: server.ClusterOpts{Name: "reins-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		})
		if err != nil {
			t.Fatal(err)
		}
		ns.Start()
		t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
		servers = append(servers, ns)
	}
	var urls []string
	for i, ns := range servers {
		if !ns.ReadyForConnections(failsafe) {
			t.Fatalf("server n%d not ready", i+1)
		}
		urls = append(urls, ns.ClientURL())
	}
	url := strings.Join(urls, ",")
	natstest.WaitJetStream(t, testCtx(t), url)
	natstest.WaitPlacement(t, testCtx(t), url, n)
	return url
}

// syncBuffer is a log sink shared by the Box's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// layoutReplicas returns the replicas of every stream, bucket and object store of the layout,
// by stream name.
func layoutReplicas(t *testing.T, js jetstream.JetStream) map[string]int {
	t.Helper()
	ctx := testCtx(t)
	got := map[string]int{}
	for _, c := range (Layout{}).streams(0) {
		got[c.Name] = streamInfo(t, js, c.Name).Config.Replicas
	}
	for _, c := range (Layout{}).buckets() {
		b := c.Bucket
		kv, err := js.KeyValue(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got["KV_"+b] = st.Config().Replicas
	}
	obs, err := js.ObjectStore(ctx, ValuesBucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := obs.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got["OBJ_"+ValuesBucket] = st.Replicas()
	return got
}

// directGets returns the streams of the layout's buckets and object store whose gets any
// replica may answer (allow_direct).
func directGets(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	var direct []string
	for _, c := range (Layout{}).buckets() {
		if b := c.Bucket; streamInfo(t, js, "KV_"+b).Config.AllowDirect {
			direct = append(direct, "KV_"+b)
		}
	}
	if streamInfo(t, js, "OBJ_"+ValuesBucket).Config.AllowDirect {
		direct = append(direct, "OBJ_"+ValuesBucket)
	}
	return direct
}

func allReplicas(t *testing.T, got map[string]int, want int) {
	t.Helper()
	l := Layout{}
	if n := len(l.streams(0)) + len(l.buckets()) + 1; len(got) != n { // + the object store
		t.Fatalf("the layout has %d streams and buckets, want %d: %v", len(got), n, got)
	}
	for name, n := range got {
		if n != want {
			t.Errorf("%s has %d replicas, want %d (all: %v)", name, n, want, got)
		}
	}
}

// On a real three-server cluster: the layout is created with what Replicas asks, raised when
// asked for more, and never lowered: not by a process that asks nothing (the default), nor by
// one that asks for fewer, which reports the names it keeps.
func TestReplicasOnACluster(t *testing.T) {
	url := startCluster(t, 3)
	ctx := testCtx(t)
	ensureWith := func(replicas int) (map[string]int, string) {
		var logs syncBuffer
		b := open(t, Options{URL: url, Replicas: replicas, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err := EnsureLayout(ctx, b.JetStream(), b.Layout()); err != nil {
			t.Fatalf("EnsureLayout with %d replicas: %v", replicas, err)
		}
		return layoutReplicas(t, b.JetStream()), logs.String()
	}

	got, _ := ensureWith(0)
	allReplicas(t, got, 1)
	js := natstest.JetStream(t, url)
	if direct := directGets(t, js); len(direct) != len(Layout{}.buckets())+1 {
		t.Errorf("with one replica, direct gets on %v, want on every bucket (the replica is the leader)", direct)
	}
	got, logs := ensureWith(3)
	allReplicas(t, got, 3)
	// A follower answers a direct get from behind its leader: reads go to the leader.
	if direct := directGets(t, js); len(direct) != 0 {
		t.Errorf("with 3 replicas, direct gets on %v, want none", direct)
	}
	// Turned on by hand, or by the library's update of a bucket (here, of its description): off
	// again at the next start.
	for _, change := range []func(*jetstream.StreamConfig){
		func(c *jetstream.StreamConfig) { c.AllowDirect = true },
		func(c *jetstream.StreamConfig) { c.AllowDirect, c.Description = true, "changed" },
	} {
		cfg := streamInfo(t, js, "KV_"+RunsBucket).Config
		change(&cfg)
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		ensureWith(3)
		if direct := directGets(t, js); len(direct) != 0 {
			t.Errorf("ensured again, direct gets on %v, want none", direct)
		}
	}
	if !strings.Contains(logs, "raised to 3 replicas") || !strings.Contains(logs, "stream "+TasksStream+" (R1)") {
		t.Errorf("raising to 3 replicas logged %q, want the names raised", logs)
	}
	got, logs = ensureWith(0) // a process started without --replicas: what exists stays
	allReplicas(t, got, 3)
	if strings.Contains(logs, "replicas") {
		t.Errorf("a process that asks nothing logged %q", logs)
	}
	got, logs = ensureWith(1)
	allReplicas(t, got, 3)
	for _, want := range []string{"have more replicas than the 1 asked", "stream " + EventsStream + " (R3)", "KV bucket " + RunsBucket + " (R3)", "object store " + ValuesBucket + " (R3)"} {
		if !strings.Contains(logs, want) {
			t.Errorf("asking for 1 replica of an R3 layout logged %q, want it to name %q", logs, want)
		}
	}

	// More replicas than servers: an error that says so, naming the stream.
	b := open(t, Options{URL: url, Replicas: 5})
	err := EnsureLayout(ctx, b.JetStream(), b.Layout())
	if err == nil || !strings.Contains(err.Error(), "needs 5 replicas") || !strings.Contains(err.Error(), "fewer than 5 servers") {
		t.Fatalf("EnsureLayout with 5 replicas on 3 servers: %v, want an error that names the cause", err)
	}
}
