package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// KeepAliveEvery is how often a stream of a run's events sends a comment line (": keep-alive")
// so that proxies keep the connection (docs/api.md).
const KeepAliveEvery = 15 * time.Second

// deltaBuffer bounds the deltas a stream holds for a client that reads slowly; more are dropped
// (deltas are not kept, and a client that misses some still gets the durable record).
const deltaBuffer = 1024

// runEvents serves GET /v1/runs/{id}/events (docs/api.md, that section): the run's durable
// events after Last-Event-ID, its status at connection and at each save of its record, the
// token deltas of its streaming steps, and `end` once it finished.
func (s *Server) runEvents(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	runID := r.PathValue("id")
	after, err := lastEventID(r)
	if err != nil {
		return err
	}
	if !s.streams.take(p.Name) {
		return s.tooManyStreams(p.Name)
	}
	defer s.streams.give(p.Name)
	c := s.client(p)
	ctx, cancel := context.WithCancel(r.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // no goroutine of the stream outlives the request
	if err := s.runExists(ctx, c, runID); err != nil {
		return err
	}
	var def *workflow.Definition // read with the first record
	// Deltas first, then the history: a delta published while the events are read back is
	// held, not missed. The flush makes sure the server has the subscription.
	deltas := make(chan []byte, deltaBuffer)
	subj, err := s.box().Names().DeltaSubject(runID)
	if err != nil {
		return err
	}
	sub, err := s.box().Conn().Subscribe(subj, func(m *nats.Msg) {
		select {
		case deltas <- m.Data:
		default: // a slow reader loses deltas, never the events
		}
	})
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
	err = s.box().Conn().FlushWithContext(fctx)
	fcancel()
	if err != nil {
		return err
	}
	updates := make(chan followed)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(updates)
		for u, err := range c.Watch(ctx, runID, client.WatchOptions{After: after}) {
			select {
			case updates <- followed{u, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	out := &sse{w: w, rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout}
	out.extend()
	w.WriteHeader(http.StatusOK)
	out.flush()
	ticks, stop := s.keepAlive()
	defer stop()
	for out.err == nil {
		select {
		case <-ctx.Done():
			return nil // the client went away
		case <-ticks:
			out.comment("keep-alive")
		case d := <-deltas:
			out.delta(runID, d)
		case f, ok := <-updates:
			if !ok {
				return nil
			}
			if f.err != nil {
				if ctx.Err() == nil {
					s.cfg.Log.Error("api: the events of a run could not be followed", "run_id", runID, "principal", p.Name, "err", f.err)
				}
				return nil // the headers are sent: the stream just ends, and the client reconnects
			}
			// The deltas received before this update go first: they reached the server before it.
			for drained := false; !drained; {
				select {
				case d := <-deltas:
					out.delta(runID, d)
				default:
					drained = true
				}
			}
			if f.u.Event != nil {
				out.message(strconv.FormatUint(f.u.Seq, 10), "event", f.u.Event)
			}
			if rec := f.u.Record; rec != nil {
				err := c.ReadValues(ctx, rec)
				if err == nil && def == nil {
					def, err = c.Definition(ctx, rec)
				}
				if err != nil {
					s.cfg.Log.Error("api: the record of a run could not be read", "run_id", runID, "err", err)
					return nil
				}
				out.message("", "status", statusOf(def, rec))
				if rec.Finished() {
					out.message("", "end", streamEnd{Status: rec.Run.Status})
					return nil
				}
			}
		}
	}
	return nil // the client went away: a write failed
}

// runExists answers nil when run runID exists: it has a record, or events only (a run just
// started, before the engine saved it); else a 404 problem.
func (s *Server) runExists(ctx context.Context, c *client.Client, runID string) error {
	if !possibleRunID(runID) {
		return problemf(http.StatusNotFound, "there is no run %s", runID)
	}
	_, err := c.Get(ctx, runID)
	if !errors.Is(err, client.ErrNotFound) {
		return err
	}
	switch last, err := c.LastEvent(ctx, runID); {
	case err != nil:
		return err
	case last == 0:
		return problemf(http.StatusNotFound, "there is no run %s", runID)
	}
	return nil
}

// followed is what client.Watch yielded, through a channel.
type followed struct {
	u   client.Update
	err error
}

func statusOf(def *workflow.Definition, rec *client.Record) StreamStatus {
	return StreamStatus{Result: client.NewResult(def, rec), Workflow: rec.Run.Workflow}
}

// lastEventID is the Last-Event-ID header: the stream sequence of the last event the client
// received (0 without the header).
func lastEventID(r *http.Request) (uint64, error) {
	v := strings.TrimSpace(r.Header.Get("Last-Event-ID"))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, problemf(http.StatusBadRequest, "the header Last-Event-ID is %q: want the id of an event this stream sent, a number", v)
	}
	return n, nil
}

// keepAlive returns the ticks of the keep-alive comments (Config.KeepAlive, default every
// KeepAliveEvery) and what stops them.
func (s *Server) keepAlive() (<-chan time.Time, func()) {
	if s.cfg.KeepAlive != nil {
		return s.cfg.KeepAlive()
	}
	t := time.NewTicker(KeepAliveEvery)
	return t.C, t.Stop
}

// sse writes Server-Sent Events, flushing after each; err is the first write's error (the
// client went away, or did not read for timeout), after which it writes nothing.
type sse struct {
	w  io.Writer
	rc *http.ResponseController
	// timeout is the server's write timeout: a stream lives longer than any answer, so each
	// write has timeout from its start, not from the request's (0: no deadline).
	timeout time.Duration
	err     error
}

func (o *sse) write(s string) {
	if o.err != nil {
		return
	}
	o.extend()
	if _, o.err = io.WriteString(o.w, s); o.err == nil {
		o.flush()
	}
}

// extend moves the connection's write deadline to timeout from now.
func (o *sse) extend() {
	if o.timeout > 0 {
		_ = o.rc.SetWriteDeadline(time.Now().Add(o.timeout))
	}
}

func (o *sse) flush() {
	if err := o.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		o.err = err
	}
}

// message writes one message of kind event with data v as JSON (one line: JSON has no raw
// newlines), with id when not "".
func (o *sse) message(id, event string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		o.err = err
		return
	}
	var b strings.Builder
	if id != "" {
		b.WriteString("id: " + id + "\n")
	}
	b.WriteString("event: " + event + "\ndata: ")
	b.Write(data)
	b.WriteString("\n\n")
	o.write(b.String())
}

func (o *sse) comment(text string) { o.write(": " + text + "\n\n") }

// delta relays a delta a worker published, decoded and written again (a message that is not
// a delta of the run is dropped): {step, iteration, turn, text, and the pieces of calls}.
func (o *sse) delta(runID string, data []byte) {
	var d protocol.Delta
	if json.Unmarshal(data, &d) != nil || d.RunID != runID {
		return
	}
	o.message("", "delta", StreamDelta{Step: d.Step, Iteration: d.Iteration, Turn: d.Turn, Text: d.Text,
		CallIndex: d.CallIndex, CallID: d.CallID, CallName: d.CallName, Arguments: d.Arguments})
}
