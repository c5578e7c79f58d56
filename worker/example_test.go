package worker_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/worker"
)

// A handler of an agent_loop step that keeps a log of its iterations in the checkpoint,
// continues until its third iteration, then completes with the log.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// The deployment's NATS server, as a worker principal (its token).
	c, err := conn.Dial(ctx, "nats://127.0.0.1:4222", conn.Token(os.Getenv("REINS_TOKEN")), conn.Name("count-worker"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close() // the worker leaves its connection open: closed once Run returned

	w, err := worker.New(c, worker.Options{})
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
