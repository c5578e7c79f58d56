package runner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
)

// The looks of a partition's consumer. The library reports a deleted consumer only through a
// pull request the server held when it deleted it: a pull request the server had not
// registered yet (the consumer is deleted right after the engine started consuming, or while
// a request is on its way) reaches no one, and every later one too, which the library reports
// as missing heartbeats and "no responders", again and again, without ever stopping. And
// after a NATS node that led the consumer died, the library was seen pulling without an error
// and without a message for minutes while events waited. So each consumption has a watcher
// that looks its consumer up, and reports that the consumption must be made again when the
// consumer is gone or the consumption stalled (watchConsumer).
//
// It looks every lookEvery on its own, and at once on a sign of trouble: the library says its
// pulls go unanswered (missing heartbeats, no responders), or the server says that the
// consumer, or the events stream, elected a leader (an advisory: the node that led it died or
// stepped down, and the pull requests it held are lost). A sign makes the consumer suspect for
// suspectFor: it is looked up again every stallAfter until it delivers (or nothing waits for
// it), so that a stall is judged stallAfter after the new leader answers, not over two looks
// lookEvery apart.

// lookEvery is how often a partition's consumer is looked up when nothing asks for it.
const lookEvery = 2 * pullExpiry

// stallAfter is the shortest time over which a consumption is judged stalled (stalled), and
// the shortest time between two looks of one consumer. A consumption that is going has a pull
// request at the consumer's leader, which delivers what waits within milliseconds of its
// coming; on two busy cores, a look's round trip takes up to a few hundred.
const stallAfter = time.Second

// suspectFor is how long a consumer is looked up every stallAfter after a sign of trouble,
// unless it delivers before: after that, the looks every lookEvery take over.
const suspectFor = lookEvery

// lookTimeout bounds one look: a consumer whose leader is being elected does not answer, and
// the sign that it was elected must not wait behind a look that waits for nothing.
const lookTimeout = 2 * stallAfter

// lookCause is why a consumer was looked up.
type lookCause int

const (
	lookTick   lookCause = iota // every lookEvery
	lookPulls                   // the library said its pulls go unanswered
	lookLeader                  // the consumer or the events stream elected a leader
	lookAgain                   // stallAfter after the last look of a suspect consumer
)

func (c lookCause) String() string {
	switch c {
	case lookTick:
		return "periodic look"
	case lookPulls:
		return "pulls unanswered"
	case lookLeader:
		return "leader elected"
	case lookAgain:
		return "look again"
	}
	return "look " + strconv.Itoa(int(c))
}

// lookAt is one look at a consumer: what it said (nil: it did not answer) and when, on the
// engine's clock.
type lookAt struct {
	info *jetstream.ConsumerInfo
	at   time.Time
}

// consumerWatch is what the watcher of a consumption knows between its looks.
type consumerWatch struct {
	prev    lookAt    // the look the next is compared with
	suspect time.Time // the last sign of trouble; zero: none, or the consumer delivered since
}

// look judges cur, a look for why at a consumer whose consumption had nothing in flight in
// the engine (settled: the library pulls again once its handler took what it pulled, so a
// partition busy in the engine cannot be judged). stall: the consumption stalled between the
// last look kept and cur, at least stallAfter apart (stalled); again: look again stallAfter
// later, the consumer being suspect. A stall seen over less than stallAfter keeps the earlier
// look, so that the next judges over the whole time.
func (w *consumerWatch) look(why lookCause, cur lookAt, settled bool) (stall, again bool) {
	if why == lookPulls || why == lookLeader {
		w.suspect = cur.at
	}
	prev := w.prev
	switch {
	case cur.info == nil: // no answer: an election, a busy server; nothing to compare
		return false, w.suspicious(cur.at)
	case settled && stalled(prev.info, cur.info) && cur.at.Sub(prev.at) >= stallAfter:
		w.prev = cur
		return true, false
	case settled && stalled(prev.info, cur.info):
		return false, true
	}
	w.prev = cur
	switch {
	case prev.info != nil && cur.info.Delivered.Stream != prev.info.Delivered.Stream && !prev.at.Before(w.suspect):
		w.suspect = time.Time{} // it delivered since the sign of trouble: it goes
	case cur.info.NumPending == 0:
		// Nothing waits, so there is nothing to judge: the looks every lookEvery will (a
		// stream's election prompts every partition, most of which may be idle).
		w.suspect = time.Time{}
	}
	return false, w.suspicious(cur.at)
}

// suspicious reports whether a sign of trouble came within suspectFor of now.
func (w *consumerWatch) suspicious(now time.Time) bool {
	return !w.suspect.IsZero() && now.Sub(w.suspect) < suspectFor
}

// stalled reports whether a consumer looked up as prev and then as cur delivered nothing
// meanwhile while events waited for it at both looks and the engine had room for them (fewer
// unacknowledged than MaxAckPending): no pull reached it, since a consumption that is going
// has a pull request at the consumer's leader (the library pulls again every pull expiry at
// most), which delivers what waits at once.
func stalled(prev, cur *jetstream.ConsumerInfo) bool {
	return prev != nil && cur != nil && prev.NumPending > 0 && cur.NumPending > 0 &&
		cur.Delivered.Stream == prev.Delivered.Stream && cur.Created.Equal(prev.Created) &&
		cur.NumAckPending < cur.Config.MaxAckPending
}

// watchConsumer looks partition p's consumer up (see above) until ctx is done, and reports in
// lost that the consumption must be made again: the consumer was deleted (wrapping
// jetstream.ErrConsumerDeleted), or it stalled. pulls says the library's pulls go unanswered;
// e.elected[p], that the consumer or the stream elected a leader.
func (e *Engine) watchConsumer(ctx context.Context, p int, cons jetstream.Consumer, pulls <-chan struct{}, lost chan<- error) {
	tick := time.NewTicker(lookEvery)
	defer tick.Stop()
	var w consumerWatch
	again := false
	for {
		why := lookAgain
		if !again {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				why = lookTick
			case <-pulls:
				why = lookPulls
			case <-e.elected[p]:
				why = lookLeader
			}
		}
		start := time.Now()
		ictx, cancel := context.WithTimeout(ctx, lookTimeout)
		info, err := cons.Info(ictx)
		cancel()
		name := cons.CachedInfo().Name
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
			err = fmt.Errorf("the consumer %s of %s is gone (%w): %w", name, e.names.EventsStream(), jetstream.ErrConsumerDeleted, err)
			e.log.Warn("runner: the consumption of a partition stopped", "consumer", name, "err", err)
			lost <- err
			return
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			e.log.Debug("runner: look the consumer up", "consumer", name, "cause", why, "err", err)
			info = nil
		}
		cur := lookAt{info: info, at: time.Now()}
		prev := w.prev
		var stall bool
		stall, again = w.look(why, cur, e.flight.settled(p))
		if e.looked != nil {
			e.looked(p, why, info, stall)
		}
		if stall {
			err = fmt.Errorf("the consumer %s of %s delivered nothing for %s with %d events waiting (%s)",
				name, e.names.EventsStream(), cur.at.Sub(prev.at).Round(time.Millisecond), info.NumPending, why)
			e.log.Warn("runner: the consumption of a partition stalled", "consumer", name, "err", err)
			lost <- err
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(stallAfter - time.Since(start)):
		}
	}
}

// watchLeaders subscribes, on the engine's connection, to the advisories that a consumer of
// the events stream, or the stream, elected a leader, and passes each on to the watcher of
// the partition's consumption (every partition's, for the stream). It returns the function
// that ends the subscriptions. Through the API of another JetStream domain or account, whose
// advisories this connection does not see, it subscribes to nothing: the looks every
// lookEvery remain.
func (e *Engine) watchLeaders() (stop func(), err error) {
	api, stream := e.box.API(), e.names.EventsStream()
	var subs []*nats.Subscription
	stop = func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}
	if subj, ok := api.ConsumerLeaderElected(stream); ok {
		s, err := e.js.Conn().Subscribe(subj, func(m *nats.Msg) {
			if p, ok := partitionOfConsumer(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]); ok {
				e.leaderElected(p)
			}
		})
		if err != nil {
			return stop, err
		}
		subs = append(subs, s)
	}
	if subj, ok := api.StreamLeaderElected(stream); ok {
		s, err := e.js.Conn().Subscribe(subj, func(*nats.Msg) {
			for p := range natsbox.Partitions {
				e.leaderElected(p)
			}
		})
		if err != nil {
			return stop, err
		}
		subs = append(subs, s)
	}
	return stop, nil
}

// leaderElected tells the watcher of partition p's consumption, if any, that a leader was
// elected.
func (e *Engine) leaderElected(p int) {
	select {
	case e.elected[p] <- struct{}{}:
	default:
	}
}

// partitionOfConsumer is the partition whose consumer is named name (consumerName), and ok.
func partitionOfConsumer(name string) (int, bool) {
	tok, ok := strings.CutPrefix(name, natsbox.EngineConsumerPrefix)
	if !ok {
		return 0, false
	}
	p, err := strconv.Atoi(tok)
	if err != nil || p < 0 || p >= natsbox.Partitions || consumerName(p) != name {
		return 0, false
	}
	return p, true
}

// consumeError logs an error of the consumption; one that ends it is kept in why. One that
// says the pull requests go unanswered tells watchConsumer (pulls).
func (e *Engine) consumeError(err error, why chan<- error, pulls chan<- struct{}) {
	if errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, nats.ErrNoResponders) {
		select {
		case pulls <- struct{}{}:
		default:
		}
	}
	switch {
	case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrBadRequest), errors.Is(err, jetstream.ErrConnectionClosed):
		e.log.Warn("runner: the consumption of a partition stopped", "err", err)
		select {
		case why <- err:
		default:
		}
	default:
		e.log.Debug("runner: consuming events", "err", err)
	}
}
