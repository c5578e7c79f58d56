//go:build e2e

package e2e

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// proxy is a TCP proxy in front of the NATS server: cut closes every connection through it, as
// a network that drops them would; the listener stays, so clients reconnect.
type proxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	conns    []net.Conn
	cuts     int
}

func newProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, upstream: upstream}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go p.serve()
	return p
}

func (p *proxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(u, c); u.Close() }()
		go func() { _, _ = io.Copy(c, u); c.Close() }()
	}
}

// cut closes every connection through the proxy.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.cuts++
}

// A worker's NATS connection cut in the middle of side effects (a TCP proxy drops it while 10
// calls run): the worker reconnects, the effects are recorded or their calls waited for, and
// every run completes with its effect done once. 10 runs: 10 effects.
func TestEffectOnceAcrossCutConnection(t *testing.T) {
	ctx, bin, c, counter, env := effectsCluster(t)
	px := newProxy(t, strings.TrimPrefix(c.url, "nats://"))
	w := start(t, "effectworker", env, bin, "-nats", px.url(), "-ack-wait", "1s", "-slow", "1s")
	w.waitFor("ready", 30*time.Second)
	ids := startRuns(t, c.url, "testdata/effectworker/paused.toml", "cut", 10)
	for range ids {
		w.waitFor("effect-start", 30*time.Second)
	}
	px.cut() // every call is in its one second of work
	checkOnce(t, ctx, c, counter, ids)
	if n := countLines(w, "effect-start"); n != len(ids) {
		t.Errorf("the tool was called %d times for %d runs", n, len(ids))
	}
	t.Logf("connections cut %d times", px.cuts)
}
