package worker_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/worker"
)

// A handler of an agent_loop step that keeps a log of its iterations in the checkpoint,
// continues until its third iteration, then completes with the log.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	box, err := natsbox.Open(ctx, natsbox.Options{DataDir: "data"})
	if err != nil {
		log.Fatal(err)
	}
	defer box.Close()

	w, err := worker.New(worker.Config{Conn: (*conn.Conn)(box)})
	if err != nil {
		log.Fatal(err)
	}
	w.Handle("count-to-three", func(tc worker.TaskContext) error {
		// Each iteration appends one entry: the bytes written do not grow with the history.
		if err := tc.AppendCheckpoint(map[string]any{"iteration": tc.Iteration(), "input": tc.Input()}); err != nil {
			return err // a failed attempt: the step's retry policy applies
		}
		if tc.Iteration() < 3 {
			return tc.Continue(map[string]int{"next": tc.Iteration() + 1})
		}
		history, err := tc.LoadCheckpoint()
		if err != nil {
			return err
		}
		return tc.CompleteWith(history, worker.Outcome{StopReason: "counted"})
	})
	if err := w.Run(ctx); err != nil { // serves until SIGINT or SIGTERM
		log.Fatal(err)
	}
}
