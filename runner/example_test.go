package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/runner"
	"github.com/reins-run/reins/workflow"
)

// A run of a one-step workflow on an embedded NATS server: an engine decides, a worker serves
// the handler "greet", a client starts the run and waits for its end.
func ExampleClient_Start() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "reins-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	box, err := natsbox.Open(ctx, natsbox.Options{DataDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer box.Close()

	// The engine.
	eng, err := runner.New(runner.Config{Conn: (*conn.Conn)(box)})
	if err != nil {
		log.Fatal(err)
	}
	engCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(engCtx) }()
	defer func() { stop(); <-done }()
	<-eng.Ready()

	// A worker for the handler "greet" (package worker does this for real).
	cons, err := box.JetStream().CreateOrUpdateConsumer(ctx, natsbox.TasksStream, jetstream.ConsumerConfig{
		Durable: "greet", FilterSubject: "reins.task.greet", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		log.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		task, _ := wire.DecodeTask(m.Data())
		var in struct{ Name string }
		_ = json.Unmarshal(task.Input, &in)
		ev := wire.Answer(task, protocol.EvCompleted, time.Now())
		ev.Output, _ = json.Marshal(map[string]string{"greeting": "hello, " + in.Name})
		data, _ := wire.EncodeEvent(ev)
		subj, _ := natsbox.Names{}.EventSubject(ev.RunID)
		_, _ = box.JetStream().Publish(ctx, subj, data, jetstream.WithMsgID(wire.EventMsgID(ev, "")))
		_ = m.Ack()
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Stop()

	// The client.
	wf := workflow.New("hello")
	wf.Task("greet", "greet")
	def, err := wf.Build()
	if err != nil {
		log.Fatal(err)
	}
	bs, err := workflow.NewBundles(def, "")
	if err != nil {
		log.Fatal(err)
	}
	client := client.New(client.Config{Conn: (*conn.Conn)(box)})
	id, err := client.Start(ctx, bs, json.RawMessage(`{"name":"Ada"}`), "example-run")
	if err != nil {
		log.Fatal(err)
	}
	rec, err := client.Wait(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rec.Run.ID, rec.Run.Status, string(rec.Run.Output))
	// Output: example-run completed {"greeting":"hello, Ada"}
}
