package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/protocol"
)

// Origin is who started a run and what it runs: what a start retried with the run's id is
// checked against (a run that exists is answered only to the principal who started it), and
// what a run is shown as (the registered version).
type Origin struct {
	RunID string
	// By is the principal who started the run, read from the subject its start came on (the
	// engine's record, or the start event while the engine has not saved one): "" for a run
	// the engine or the server started on a subject of its own (a sub-run).
	By string
	// Hash is the hash of the definition the run runs.
	Hash string
	// Registered is the registered version the run runs: what its start says, when that
	// version's definition is the run's (a start that claims another is not believed); nil
	// for a run of no registered version.
	Registered *protocol.Registration
}

// Origin returns the origin of run runID: [ErrNotFound] when there is neither a record nor a
// start of it.
func (c *Client) Origin(ctx context.Context, runID string) (Origin, error) {
	o := Origin{RunID: runID}
	rec, err := c.Get(ctx, runID)
	switch {
	case err == nil:
		o.By, o.Hash = rec.Run.StartedBy, rec.Run.Hash
	case !errors.Is(err, ErrNotFound):
		return o, err
	}
	start, err := c.startEvent(ctx, runID)
	if err != nil {
		return o, err
	}
	if rec == nil {
		if start == nil {
			return o, fmt.Errorf("client: run %s: %w", runID, ErrNotFound)
		}
		o.By, o.Hash = start.By, start.Workflow
	}
	o.Registered, err = c.believe(ctx, start, o.Hash)
	return o, err
}

// RegisteredOf returns the registered version the run of rec runs, given its events (Events):
// Origin's Registered, without reading them again.
func (c *Client) RegisteredOf(ctx context.Context, rec *Record, events []protocol.Event) (*protocol.Registration, error) {
	if rec == nil || rec.Run == nil {
		return nil, nil
	}
	for i := range events {
		if events[i].Type == protocol.EvStart {
			return c.believe(ctx, &events[i], rec.Run.Hash)
		}
	}
	return nil, nil
}

// believe returns the registered version start names when the run runs its definition (hash);
// nil when it names none, or one whose definition is another.
func (c *Client) believe(ctx context.Context, start *protocol.Event, hash string) (*protocol.Registration, error) {
	if start == nil || start.Registered == nil || start.Workflow != hash || hash == "" {
		return nil, nil
	}
	v, err := c.Workflow(ctx, start.Registered.Name, start.Registered.Version)
	switch {
	case err == nil && v.Hash == hash:
		return &protocol.Registration{Name: v.Name, Version: v.Version}, nil
	case err == nil || errors.Is(err, ErrNoWorkflow) || errors.Is(err, ErrNoVersion):
		return nil, nil
	}
	return nil, err
}

// VersionOf tells which version of the workflow registered as name the run of o runs: the
// version its start names, or, for a run whose start names none (started before starts
// named them), the latest version whose definition is the run's; 0 when it runs none of
// them.
func (c *Client) VersionOf(ctx context.Context, o Origin, name string) (int, error) {
	if o.Registered != nil {
		if o.Registered.Name == name {
			return o.Registered.Version, nil
		}
		return 0, nil
	}
	reg, err := c.registry(ctx)
	if err != nil {
		return 0, err
	}
	latest, _, err := c.latest(ctx, reg, name)
	if err != nil {
		return 0, err
	}
	for n := latest.Version; n >= 1 && o.Hash != ""; n-- {
		v, err := c.version(ctx, reg, name, n)
		if errors.Is(err, ErrNoVersion) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if v.Hash == o.Hash {
			return n, nil
		}
	}
	return 0, nil
}

// startEvent reads the first start event of run runID that came on a subject a start may
// come on (nil when there is none), without reading the rest of its events.
func (c *Client) startEvent(ctx context.Context, runID string) (*protocol.Event, error) {
	s, filters, last, err := c.runEvents(ctx, runID)
	if err != nil || last == 0 {
		return nil, err
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: filters, InactiveThreshold: 10 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("client: the start of run %s: %w", runID, err)
	}
	defer dropConsumer(s, cons)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the pump
	msgs := make(chan seqEvent)
	go c.pumpEvents(ctx, cons, runID, msgs)
	for {
		m := <-msgs
		switch {
		case m.err != nil:
			return nil, fmt.Errorf("client: the start of run %s: %w", runID, m.err)
		case m.ev != nil && m.ev.Type == protocol.EvStart:
			return m.ev, nil
		case m.seq >= last:
			return nil, nil
		}
	}
}
