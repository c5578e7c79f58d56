package natsbox

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestKeeperRenewal publishes tasks and acknowledges each before the next, as a single agent
// loop does, through several blocks of REINS_TASKS. With the keeper renewed (Stored after each
// task) the stream keeps a few block files and one keeper message. Without it, the control:
// once the first block is full, nearly every acknowledgement empties the block written into,
// and the file store replaces it with a new file.
func TestKeeperRenewal(t *testing.T) {
	const tasks, size = 2000, 8 << 10 // 16 MB in all: several blocks
	for _, tc := range []struct {
		name           string
		renew          bool
		minBlk, maxBlk int
	}{
		{"control", false, 100, 1 << 30},
		{"renewed", true, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			box := open(t, Options{DataDir: dir})
			js := box.JetStream()
			ensure(t, js)
			ctx := testCtx(t)
			stream, err := js.Stream(ctx, TasksStream)
			if err != nil {
				t.Fatal(err)
			}
			keeper := NewKeeper(box.Conn(), Names{}, stream)
			subject := taskSubject(t, "loop")
			cons, err := js.CreateOrUpdateConsumer(ctx, TasksStream, jetstream.ConsumerConfig{
				Durable: "loop", FilterSubject: subject, AckPolicy: jetstream.AckExplicitPolicy,
			})
			if err != nil {
				t.Fatal(err)
			}
			payload := []byte(strings.Repeat("x", size))
			for i := range tasks {
				if _, err := Publish(ctx, box.Conn(), &nats.Msg{Subject: subject, Data: payload}); err != nil {
					t.Fatalf("task %d: publish: %v", i, err)
				}
				if tc.renew {
					if err := keeper.Stored(ctx, len(payload)); err != nil {
						t.Fatalf("task %d: Stored: %v", i, err)
					}
				}
				msg, err := cons.Next(jetstream.FetchMaxWait(failsafe))
				if err != nil {
					t.Fatalf("task %d: next: %v", i, err)
				}
				if err := msg.DoubleAck(ctx); err != nil {
					t.Fatalf("task %d: ack: %v", i, err)
				}
			}
			// The file store's own layout: DATA/jetstream/<account>/streams/<stream>/msgs.
			blks, err := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", TasksStream, "msgs", "*.blk"))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d block files after %d tasks of %d bytes", len(blks), tasks, size)
			if n := len(blks); n < tc.minBlk || n > tc.maxBlk {
				t.Errorf("%d block files after %d tasks of %d bytes, want %d to %d", n, tasks, size, tc.minBlk, tc.maxBlk)
			}
			if n, k := streamInfo(t, js, TasksStream).State.Msgs, keepers(t, js); n != 1 || k != 1 {
				t.Errorf("TASKS holds %d messages, %d of them keepers, after every task was acknowledged: want the one keeper", n, k)
			}
		})
	}
}
