package natsbox

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/reins-run/reins/internal/testkit/allocs"
)

// FuzzDeliveryOf: DeliveryOf reads any reply subject as the library's Metadata does (the same
// count and time, and a refusal where it fails), both forms of the subject included.
func FuzzDeliveryOf(f *testing.F) {
	for _, s := range []string{
		"$JS.ACK.REINS_TASKS.reins_tasks_agent.3.1201.1187.1795255200123456789.0",
		"$JS.ACK.hub.ABCDEF.REINS_EVENTS.part-03.1.99.98.1795255200123456789.4.x7Yq",
		"$JS.ACK._.ABCDEF.S.C.2.1.1.17.0",
		"$JS.ACK.S.C.1x.1.1.17.0", "$JS.ACK.S.C.1.1.1.99999999999999999999999.0", "$JS.ACK.a.b.c.d.e.f.g.h.i.j.k.l.m",
		"$JS.ACK.S.C.1.1.1.17", "_INBOX.x.y", "", "$JS.ACK.S.C.1.1.1.1.0.0", "$JS.ACK.S.C.١.1.1.1.0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		got, ok := DeliveryOf(reply)
		md, err := (&nats.Msg{Reply: reply, Sub: &nats.Subscription{}}).Metadata()
		if ok != (err == nil) {
			t.Fatalf("DeliveryOf(%q) ok = %v; Metadata err = %v", reply, ok, err)
		}
		if ok && (got.NumDelivered != md.NumDelivered || !got.Timestamp.Equal(md.Timestamp)) {
			t.Fatalf("DeliveryOf(%q) = %+v; Metadata reads %d, %v", reply, got, md.NumDelivered, md.Timestamp)
		}
	})
}

// TestDeliveryOfAllocs: reading a delivery allocates nothing.
func TestDeliveryOfAllocs(t *testing.T) {
	reply := "$JS.ACK.hub.ABCDEF.REINS_EVENTS.part-03.1.99.98.1795255200123456789.4.x7Yq"
	if d, ok := DeliveryOf(reply); !ok || d.NumDelivered != 1 || d.Timestamp.UnixNano() != 1795255200123456789 {
		t.Fatalf("DeliveryOf = %+v, %v", d, ok)
	}
	if n := allocs.PerRun(100, func() { _, _ = DeliveryOf(reply) }); n != 0 {
		t.Errorf("DeliveryOf allocates %v times, want 0", n)
	}
}

// TestTaskSubjectAllocs: a handler's task subject is the same string each time, made once.
func TestTaskSubjectAllocs(t *testing.T) {
	n := Names{}
	want := n.TaskSubjectPrefix() + "agent.loop"
	if s, err := n.TaskSubject("agent.loop"); err != nil || s != want {
		t.Fatalf("TaskSubject = %q, %v; want %q", s, err, want)
	}
	if n := allocs.PerRun(100, func() { _, _ = n.TaskSubject("agent.loop") }); n != 0 {
		t.Errorf("TaskSubject allocates %v times, want 0", n)
	}
	if _, err := n.TaskSubject("bad handler"); err == nil {
		t.Error("TaskSubject of a handler with a space: no error")
	}
}
