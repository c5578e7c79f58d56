// Package natstest holds what the tests that run NATS server processes or clusters share, for
// test packages that cannot import internal/testkit/runtest (natsbox's own, whose package runtest
// imports): a free loopback port, the wait for a cluster's JetStream, and nats-servers in this
// process (a hub and its leaf node, each with a JetStream domain; a server with accounts). It
// imports no reins package, and nothing but tests imports it.
package natstest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// JetStream connects to the servers at url for the length of the test.
func JetStream(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	return JetStreamDomain(t, url, "")
}

// JetStreamDomain is JetStream for the JetStream of domain ("": the server's own).
func JetStreamDomain(t testing.TB, url, domain string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if domain != "" {
		js, err = jetstream.NewWithDomain(nc, domain)
	}
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// WaitJetStream waits, until ctx ends, for the servers at url to answer JetStream requests: a
// cluster's servers elect a meta leader on their own, and nothing tells a client when, so it
// asks until one answers.
func WaitJetStream(t testing.TB, ctx context.Context, url string) {
	t.Helper()
	WaitJetStreamDomain(t, ctx, url, "")
}

// WaitJetStreamDomain is WaitJetStream for the JetStream of domain as a client at url reaches
// it ("": the server's own): a leaf node reaches its hub's once its leaf connection is up,
// which nothing tells a client either.
func WaitJetStreamDomain(t testing.TB, ctx context.Context, url, domain string) {
	t.Helper()
	js := JetStreamDomain(t, url, domain)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the servers at %s answered no JetStream request (domain %q) before the deadline: %v", url, domain, err)
		case <-tick.C:
		}
	}
}

// WaitPlacement waits, until ctx ends, for the cluster at url to place a stream of replicas
// replicas: a node whose routes are not up yet is a peer offline, and a stream asked of the
// cluster then fails.
func WaitPlacement(t testing.TB, ctx context.Context, url string, replicas int) {
	t.Helper()
	js := JetStream(t, url)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := js.CreateStream(actx, jetstream.StreamConfig{Name: "NATSTEST_PROBE", Subjects: []string{"natstest.probe"}, Replicas: replicas, Storage: jetstream.MemoryStorage})
		if err == nil {
			err = js.DeleteStream(actx, "NATSTEST_PROBE")
		}
		cancel()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the cluster at %s placed no stream of %d replicas before the deadline: %v", url, replicas, err)
		case <-tick.C:
		}
	}
}

// HubAndLeaf starts two nats-servers with JetStream in this process: a hub whose JetStream
// domain is hubDomain, and a leaf node connected to it whose own JetStream is in domain
// leafDomain, both in their global account, without authentication. It returns them once the
// leaf's clients reach the hub's JetStream through hubDomain.
func HubAndLeaf(t testing.TB, ctx context.Context, hubDomain, leafDomain string) (hub, leaf *server.Server) {
	t.Helper()
	return HubAndLeafUsers(t, ctx, hubDomain, leafDomain, nil)
}

// HubAndLeafUsers is HubAndLeaf with a leaf node whose clients authenticate as one of users
// (user name and password, in the leaf's global account, each with its permissions). The
// first of them must be allowed everything: the wait for the hub's JetStream connects as it.
// Without users, clients connect without authentication.
func HubAndLeafUsers(t testing.TB, ctx context.Context, hubDomain, leafDomain string, users []*server.User) (hub, leaf *server.Server) {
	t.Helper()
	leafPort := FreePort(t)
	hub = StartServer(t, &server.Options{ServerName: "hub", JetStreamDomain: hubDomain,
		LeafNode: server.LeafNodeOpts{Host: "127.0.0.1", Port: leafPort}})
	remote, err := url.Parse(fmt.Sprintf("nats://127.0.0.1:%d", leafPort))
	if err != nil {
		t.Fatal(err)
	}
	leaf = StartServer(t, &server.Options{ServerName: "leaf", JetStreamDomain: leafDomain, Users: users,
		LeafNode: server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{{URLs: []*url.URL{remote}}}}})
	waitURL := leaf.ClientURL()
	if len(users) > 0 {
		waitURL = UserURL(waitURL, users[0].Username, users[0].Password)
	}
	WaitJetStreamDomain(t, ctx, waitURL, hubDomain)
	return hub, leaf
}

// UserURL is the client URL u ("nats://host:port") with a user name and password.
func UserURL(u, user, password string) string {
	return strings.Replace(u, "nats://", "nats://"+url.UserPassword(user, password).String()+"@", 1)
}

// StartServer starts a nats-server with JetStream in this process on a free loopback port, with
// opts (server name, domain, leaf nodes, accounts: what the caller sets), and stops it when
// the test ends.
func StartServer(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.JetStream, opts.StoreDir = true, t.TempDir()
	opts.NoSigs, opts.NoLog = true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatalf("nats-server %s not ready", opts.ServerName)
	}
	return ns
}

// StartAccounts starts a nats-server in this process (StartServer) with the accounts and
// users of conf, a server configuration's text, and returns a function giving its client
// URL for a "user:password".
func StartAccounts(t testing.TB, conf string) func(user string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "accounts.conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatal(err)
	}
	opts.ServerName = "accounts"
	srv := StartServer(t, opts)
	return func(user string) string { return strings.Replace(srv.ClientURL(), "nats://", "nats://"+user+"@", 1) }
}
