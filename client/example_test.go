package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/reins-run/reins"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// A program with no engine of its own: it dials a reins server (here one this example starts,
// as `reins serve` would run elsewhere), serves a handler with a worker on the same
// connection, starts a run, approves it and watches it to its end.
func ExampleDial() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "reins-example")
	defer os.RemoveAll(dir)
	srv, err := reins.New(ctx, reins.Config{DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	token, _ := operator.ReadAdminToken(dir)

	c, err := client.Dial(ctx, srv.ClientURL(), conn.Token(token))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	w, err := worker.New(c.Conn(), worker.Options{})
	if err != nil {
		panic(err)
	}
	w.Handle("pack", func(tc worker.TaskContext) error { return tc.Complete("packed") })
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go w.Run(wctx)

	wf := workflow.New("ship")
	wf.Approval("ask", "Ship?")
	wf.Task("pack", "pack")
	wf.Edge("ask", "pack").When("approved")
	def, _ := wf.Build()
	bs, _ := workflow.NewBundles(def, "")
	id, err := c.Start(ctx, bs, json.RawMessage(`{"order":"O-1"}`), "")
	if err != nil {
		panic(err)
	}
	approved := false
	for u, err := range c.Watch(ctx, id, client.WatchOptions{Only: client.WatchRecords}) {
		if err != nil {
			panic(err)
		}
		if u.Record.Run.Status == reins.RunWaiting && !approved {
			approved = true
			if err := c.Approve(ctx, id, "ask", "ship it"); err != nil {
				panic(err)
			}
		}
		if u.Record.Finished() {
			fmt.Println(u.Record.Run.Status, string(u.Record.Run.Output))
		}
	}
	// Output: completed "packed"
}
