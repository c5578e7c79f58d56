package natsbox

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// resetStream opens a server with the stream RESET holding the messages "1" … "n" and its
// consumer "c", explicitly acknowledged, with an AckWait of an hour.
func resetStream(ctx context.Context, t *testing.T, n int) (jetstream.JetStream, jetstream.Consumer) {
	t.Helper()
	js := open(t, Options{DataDir: t.TempDir()}).JetStream()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RESET", Subjects: []string{"reset.>"}}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateConsumer(ctx, "RESET", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if _, err := js.Publish(ctx, "reset.x", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	return js, cons
}

// TestResetConsumer: deliveries lost on their way (fetched and never acknowledged, as when a
// node stops with them in a buffer) come again at once after a reset, without waiting for
// AckWait (an hour here); what was acknowledged does not, and the reset names where it starts.
// A consumer that does not exist is an error (the server answers nothing: the caller's bound).
func TestResetConsumer(t *testing.T) {
	ctx := testCtx(t)
	js, cons := resetStream(ctx, t, 3)
	first, err := cons.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range first.Messages() {
		if n++; n == 1 {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		} // the others are lost on their way
	}
	if n != 3 {
		t.Fatalf("fetched %d messages, want 3", n)
	}
	seq, err := ResetConsumer(ctx, js, "RESET", "c", 0)
	if err != nil {
		t.Fatal(err)
	}
	if seq != 2 {
		t.Errorf("the reset delivers from %d, want 2: after the acknowledged floor", seq)
	}
	again, err := cons.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := range again.Messages() {
		got = append(got, string(m.Data()))
	}
	if len(got) != 2 || got[0] != "2" || got[1] != "3" {
		t.Fatalf("after the reset: %q, want the two not acknowledged, [2 3], at once", got)
	}
	mctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond) // the server answers nothing: callers bound it
	defer cancel()
	if _, err = ResetConsumer(mctx, js, "RESET", "missing", 0); err == nil {
		t.Error("the reset of a consumer that does not exist succeeded")
	}
}

// TestResetConsumerTo: a reset to a sequence moves the consumer there, both ways: what lies
// below it counts as acknowledged (the floor is the sequence before it), and what lies from it
// on is delivered, acknowledged before or not.
func TestResetConsumerTo(t *testing.T) {
	ctx := testCtx(t)
	js, cons := resetStream(ctx, t, 5)
	fetch := func(n int) []string {
		t.Helper()
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for m := range batch.Messages() {
			got = append(got, string(m.Data()))
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return got
	}
	for _, c := range []struct {
		to        uint64
		want      []string
		wantFloor uint64
	}{
		{to: 4, want: []string{"4", "5"}, wantFloor: 3},           // forward: 1 to 3 taken as acknowledged
		{to: 2, want: []string{"2", "3", "4", "5"}, wantFloor: 1}, // back: acknowledged ones come again
	} {
		seq, err := ResetConsumer(ctx, js, "RESET", "c", c.to)
		if err != nil {
			t.Fatal(err)
		}
		if seq != c.to {
			t.Errorf("a reset to %d delivers from %d", c.to, seq)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.AckFloor.Stream != c.wantFloor {
			t.Errorf("after a reset to %d the acknowledged floor is %d, want %d", c.to, info.AckFloor.Stream, c.wantFloor)
		}
		if got := fetch(len(c.want)); strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("after a reset to %d: %q, want %q", c.to, got, c.want)
		}
	}
}
