package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/ratelimit"
)

// TestServeSharesProviderLimits: reins serve --config with max_concurrent = 1 on a model lets
// one of four runs' calls reach the provider at a time: while the first is held by the
// provider, the three others queue in reins_limits (none reaches the provider), and every run
// completes once the provider answers.
func TestServeSharesProviderLimits(t *testing.T) {
	var inflight, most, calls atomic.Int64
	release := make(chan struct{})
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if calls.Add(1) == 1 {
			<-release // the first call is held until the others queue
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"m1","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
	}))
	defer provider.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	dir := t.TempDir()
	cfg := writeTestFile(t, "ops.toml", `
[providers.local]
kind = "openai"
base_url = "`+provider.URL+`/v1"

[providers.local.model_limits.m1]
max_concurrent = 1
`)
	srv := startServe(t, filepath.Join(dir, "data"), "--config", cfg)
	c := srv.client(t)
	file := writeTestFile(t, "ask.toml", "name = \"ask\"\n[models.m]\nprovider = \"local\"\nmodel = \"m1\"\n[[steps]]\nid = \"ask\"\ntype = \"llm\"\nmodel = \"m\"\nprompt = \"hi\"\n")
	var ids []string
	for range 4 {
		code, out, errOut := cli(t, "run", file, "--nats", srv.url, "--detach")
		if code != exitOK {
			t.Fatalf("run --detach: exit %d\n%s%s", code, out, errOut)
		}
		ids = append(ids, strings.TrimSpace(out))
	}

	box, err := natsbox.Open(t.Context(), natsbox.Options{URL: srv.url, Token: srv.token})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	kv, err := box.JetStream().KeyValue(t.Context(), box.Names().LimitsBucket())
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	w, err := kv.Watch(wctx, ratelimit.ModelKey("local", "m1"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for e := range w.Updates() { // the three other calls queue behind the held one
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		if st, err := ratelimit.DecodeState(e.Value()); err == nil && len(st.Slots) == 1 && len(st.Queue) == 3 {
			break
		}
	}
	if wctx.Err() != nil {
		t.Fatalf("the calls never queued in reins_limits (the provider got %d)", calls.Load())
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the provider got %d calls while its one slot was held", n)
	}
	close(release)
	for _, id := range ids {
		if rec := wait(t, c, id); rec.Run.Status != protocol.RunCompleted {
			t.Errorf("run %s ended %s: %v", id, rec.Run.Status, rec.Run.Error)
		}
	}
	if calls.Load() != 4 || most.Load() != 1 {
		t.Errorf("the provider got %d calls, at most %d at once: want 4, one at a time", calls.Load(), most.Load())
	}
}
