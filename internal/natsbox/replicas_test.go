package natsbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// The embedded server is one server: more than one replica is refused before it starts, and a
// single server that is not clustered explains why a layout of 3 cannot be made.
func TestReplicasRefused(t *testing.T) {
	for _, tc := range []struct {
		replicas int
		want     string
	}{
		{2, "2 replicas need a NATS cluster of at least 2 servers; the embedded server is one"},
		{-1, "Replicas is -1"},
	} {
		b, err := Open(testCtx(t), Options{DataDir: t.TempDir(), Replicas: tc.replicas})
		if err == nil {
			b.Close()
			t.Fatalf("Open with %d replicas succeeded", tc.replicas)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open with %d replicas: %q, want %q", tc.replicas, err, tc.want)
		}
	}
	ext := open(t, Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Authenticate: testAuth})
	b := open(t, Options{URL: ext.ClientURL(), Token: testToken, Replicas: 3})
	err := EnsureLayout(testCtx(t), b.JetStream(), b.Layout())
	var api *jetstream.APIError
	if err == nil || !strings.Contains(err.Error(), "needs 3 replicas") || !errors.As(err, &api) {
		t.Errorf("EnsureLayout with 3 replicas on one server: %v, want an error that names the cause and wraps the server's", err)
	}
}
