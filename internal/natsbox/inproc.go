package natsbox

import (
	"net"
	"sync"
	"time"
)

// inProcess hands nats.go the embedded server's in-process connections with write deadlines
// that allocate nothing. nats.go sets a deadline around every write it makes (its
// timeoutWriter, FlusherTimeout), and the server's in-process connection, a net.Pipe, makes a
// new runtime timer and closure for each (time.AfterFunc): six allocations and two timer
// operations of the runtime per durable iteration.
type inProcess struct {
	srv interface{ InProcessConn() (net.Conn, error) }
}

// InProcessConn returns a new in-process connection of the server, as a [deadlineConn].
func (p inProcess) InProcessConn() (net.Conn, error) {
	c, err := p.srv.InProcessConn()
	if err != nil {
		return nil, err
	}
	return newDeadlineConn(c), nil
}

// deadlineConn keeps one timer per connection for its write deadline, reset for each deadline
// set, rather than the pipe's timer per deadline. When it fires before the deadline is set
// again, the pipe's own write deadline is set in the past: a write blocked on the pipe ends
// with the pipe's timeout error (os.ErrDeadlineExceeded), as it would at the pipe's own
// deadline, and so does any write until a deadline is set again. Reads go to the pipe as they
// are.
type deadlineConn struct {
	net.Conn
	mu    sync.Mutex
	timer *time.Timer
	// deadline is the write deadline set (zero: none); passed, that the pipe's own is set in
	// the past because it passed.
	deadline time.Time
	passed   bool
}

func newDeadlineConn(c net.Conn) *deadlineConn {
	d := &deadlineConn{Conn: c}
	d.timer = time.AfterFunc(time.Hour, d.expire)
	d.timer.Stop()
	return d
}

// longAgo is a write deadline that has passed.
var longAgo = time.Unix(1, 0)

// expire ends a blocked write once the deadline set has passed. A timer that fires for a
// deadline set again since (its Stop came too late) finds the new one ahead, and does nothing.
func (d *deadlineConn) expire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.deadline.IsZero() || time.Now().Before(d.deadline) {
		return
	}
	d.passed = true
	_ = d.Conn.SetWriteDeadline(longAgo)
}

// SetWriteDeadline sets the deadline of writes: t zero for none.
func (d *deadlineConn) SetWriteDeadline(t time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.timer.Stop()
	d.deadline = t
	if d.passed {
		d.passed = false
		if err := d.Conn.SetWriteDeadline(time.Time{}); err != nil {
			return err
		}
	}
	if t.IsZero() {
		return nil
	}
	wait := time.Until(t)
	if wait <= 0 {
		d.passed = true
		return d.Conn.SetWriteDeadline(longAgo)
	}
	d.timer.Reset(wait)
	return nil
}

// SetDeadline sets the deadlines of reads and writes.
func (d *deadlineConn) SetDeadline(t time.Time) error {
	if err := d.SetWriteDeadline(t); err != nil {
		return err
	}
	return d.Conn.SetReadDeadline(t)
}

// Close stops the timer and closes the pipe.
func (d *deadlineConn) Close() error {
	d.mu.Lock()
	d.timer.Stop()
	d.deadline = time.Time{}
	d.mu.Unlock()
	return d.Conn.Close()
}
