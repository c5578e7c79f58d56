// Package natstest holds what the tests that run NATS server processes or clusters share, for
// test packages that cannot import internal/runtest (natsbox's own, whose package runtest
// imports): a free loopback port, and the wait for a cluster's JetStream. It imports no reins
// package, and nothing but tests imports it.
package natstest

import (
	"context"
	"net"
	"testing"
	"time"

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
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
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
	js := JetStream(t, url)
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
			t.Fatalf("the servers at %s elected no JetStream meta leader before the deadline: %v", url, err)
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
