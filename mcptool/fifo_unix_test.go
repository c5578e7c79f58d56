//go:build unix

package mcptool

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// makeFifo creates a named pipe in a temporary directory.
func makeFifo(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "started")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// unblockFifo releases a reader blocked opening the named pipe.
func unblockFifo(path string) {
	if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
		f.Close()
	}
}

func TestCancelSlowCall(t *testing.T) {
	ts := connectStdio(t, "")
	tools := toolMap(t, ts)
	fifo := makeFifo(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	args, _ := json.Marshal(map[string]string{"fifo": fifo})
	done := make(chan error, 1)
	go func() {
		_, err := tools["slow"].Call(ctx, args, "")
		done <- err
	}()
	awaitFifo(t, fifo, done)

	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("slow after cancel: %v, want context.Canceled", err)
	}
	wantToolError(t, err, true, "tool slow")

	// The session survives a cancelled call.
	if got := call(t, tools["echo"], `{"text":"after"}`, ""); got != `"after"` {
		t.Errorf("echo after a cancelled call = %s", got)
	}
}
