package natsbox

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/reins-run/reins/internal/testkit/allocs"
)

// pipe returns the two ends of a net.Pipe, the writer's behind a deadlineConn, closed with the
// test.
func pipe(t *testing.T) (*deadlineConn, net.Conn) {
	t.Helper()
	w, r := net.Pipe()
	d := newDeadlineConn(w)
	t.Cleanup(func() { _ = d.Close(); _ = r.Close() })
	return d, r
}

// readOne reads what one write sends on r, in the background.
func readOne(r net.Conn, n int) <-chan []byte {
	got := make(chan []byte, 1)
	go func() {
		buf := make([]byte, n)
		_, _ = io.ReadFull(r, buf)
		got <- buf
	}()
	return got
}

// A deadlineConn's write deadline does what the pipe's does: a write that nobody reads ends
// with the pipe's timeout error at the deadline, and at once for a deadline past; a write
// read in time, or with no deadline, goes through; a deadline set again after one passed
// lets writes through again; a timer that fires for a deadline set again since changes
// nothing.
func TestDeadlineConn(t *testing.T) {
	t.Run("a write nobody reads ends at the deadline", func(t *testing.T) {
		d, _ := pipe(t)
		if err := d.SetWriteDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the write ended with %v, want the pipe's timeout", err)
		}
	})
	t.Run("a deadline past ends the write at once", func(t *testing.T) {
		d, _ := pipe(t)
		if err := d.SetWriteDeadline(time.Now().Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the write ended with %v, want the pipe's timeout", err)
		}
	})
	t.Run("writes go through after a deadline passed and was set again", func(t *testing.T) {
		d, r := pipe(t)
		_ = d.SetWriteDeadline(time.Now().Add(time.Millisecond))
		if _, err := d.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the write ended with %v, want the pipe's timeout", err)
		}
		for _, next := range []time.Time{{}, time.Now().Add(time.Hour)} {
			if err := d.SetWriteDeadline(next); err != nil {
				t.Fatal(err)
			}
			got := readOne(r, 2)
			if _, err := d.Write([]byte("ok")); err != nil {
				t.Fatalf("a write after the deadline was set to %v: %v", next, err)
			}
			if b := <-got; string(b) != "ok" {
				t.Fatalf("read %q", b)
			}
		}
	})
	t.Run("a timer that fires late changes nothing", func(t *testing.T) {
		d, r := pipe(t)
		_ = d.SetWriteDeadline(time.Now().Add(time.Hour))
		_ = d.SetWriteDeadline(time.Time{})
		d.expire() // as the timer would, had it fired as the deadline was cleared
		_ = d.SetWriteDeadline(time.Now().Add(time.Hour))
		d.expire() // as a timer of an earlier deadline would, after this one was set
		got := readOne(r, 2)
		if _, err := d.Write([]byte("ok")); err != nil {
			t.Fatalf("a write after a late timer: %v", err)
		}
		<-got
	})
}

// Setting and clearing a deadline allocates nothing, where the pipe's own makes a timer and
// its closure each time: nats.go does both around every write.
func TestDeadlineConnAllocs(t *testing.T) {
	d, _ := pipe(t)
	w, _ := net.Pipe()
	defer w.Close()
	around := func(c net.Conn) func() {
		return func() {
			_ = c.SetWriteDeadline(time.Now().Add(time.Minute))
			_ = c.SetWriteDeadline(time.Time{})
		}
	}
	if n := allocs.PerRun(100, around(d)); n != 0 {
		t.Errorf("a deadline set and cleared allocates %v times, want 0", n)
	}
	if n := allocs.PerRun(100, around(w)); n == 0 {
		t.Error("the pipe's own deadline allocates nothing: the wrapper is not needed")
	}
}
