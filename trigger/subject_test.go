package trigger_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/runner"
	"github.com/reins-run/reins/trigger"
)

const onOrder = `name = "orders"
[[steps]]
id = "done"
type = "terminate"
[[triggers]]
name = "created"
subject = "orders.created"
`

// runService runs a Service with the operator's subjects until the returned stop.
func runService(t *testing.T, v *runtest.Env, subjects ...string) (*trigger.Service, func()) {
	t.Helper()
	s := trigger.New(trigger.Config{Conn: (*conn.Conn)(v.Box), Log: runtest.Logger(t), Subjects: subjects})
	ready := make(chan struct{})
	stop := v.Go(func(ctx context.Context) error { return s.Run(ctx, ready) }, ready)
	return s, stop
}

func publish(t *testing.T, v *runtest.Env, subject, id, body string) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = []byte(body)
	if id != "" {
		m.Header.Set(nats.MsgIdHdr, id)
	}
	if _, err := v.Box.JetStream().PublishMsg(v.Ctx, m); err != nil {
		t.Fatal(err)
	}
}

// TestSubjectTrigger: a message on the subject starts a run with the message as its input; a
// message that is not a JSON object is counted and starts nothing; a message published while
// no Service runs waits in the stream and starts its run when one runs again.
func TestSubjectTrigger(t *testing.T) {
	v := runtest.New(t)
	eng, err := runner.New(runner.Config{Conn: (*conn.Conn)(v.Box), AckWait: runtest.AckWait, Logger: runtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	v.Go(eng.Run, eng.Ready())
	register(t, v, "orders", onOrder)
	s, stop := runService(t, v, "orders.>")
	id := func(msgID string) string { return trigger.RunID("subject", "orders", "created", "id:"+msgID) }

	publish(t, v, "orders.created", "m-1", `{"order_id": "O-1"}`)
	rec := v.Wait(id("m-1"))
	if got := string(rec.Run.Input); got != `{"order_id": "O-1"}` && got != `{"order_id":"O-1"}` {
		t.Fatalf("input %s", got)
	}
	if rec.Run.StartedBy != "admin" {
		t.Fatalf("started by %q, want admin, who registered the workflow", rec.Run.StartedBy)
	}
	// Messages of one consumer are handled in order: once m-2's run exists, the two before it
	// were handled.
	publish(t, v, "orders.created", "bad-1", `not json`)
	publish(t, v, "orders.created", "bad-2", `[1, 2]`)
	publish(t, v, "orders.shipped", "other", `{"order_id": "O-1"}`) // captured, no trigger listens
	publish(t, v, "orders.created", "m-2", `{"order_id": "O-2"}`)
	v.Wait(id("m-2"))
	if n := s.Refused(); n != 2 {
		t.Fatalf("refused %d messages, want 2", n)
	}
	for _, bad := range []string{"bad-1", "bad-2"} {
		if _, err := v.Client.Get(v.Ctx, id(bad)); err == nil {
			t.Fatalf("message %s started a run", bad)
		}
	}

	// No Service runs: the message waits in the stream for the trigger's consumer.
	stop()
	publish(t, v, "orders.created", "m-3", `{"order_id": "O-3"}`)
	if _, err := v.Client.Get(v.Ctx, id("m-3")); err == nil {
		t.Fatal("a run started while no Service ran")
	}
	runService(t, v, "orders.>")
	v.Wait(id("m-3"))
	if _, err := v.Client.Get(v.Ctx, id("m-1")); err != nil {
		t.Fatal(err)
	}
	if recs, err := v.Client.List(v.Ctx, ""); err != nil || len(recs) != 3 {
		t.Fatalf("%d runs (%v), want 3: m-1, m-2, m-3", len(recs), err)
	}
}
