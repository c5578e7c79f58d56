//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/runner"
)

// floorLoops is the floor of a NATS node's failover: one loop per partition, each on a subject
// of its own of an R3 stream with a durable consumer of its own, publishing an iteration,
// fetching it and acknowledging it, then the next. That is a durable iteration in raw
// JetStream on the same cluster, with nothing of reins: after a node dies, no loop can go on
// before the streams and consumers the node led elected another leader (nats-server waits 4 to
// 9 s for a leader's heartbeats before it elects one), and none should wait longer.
type floorLoops struct {
	mu   sync.Mutex
	grew chan struct{} // closed and replaced at every iteration acknowledged
	done map[string]int
	// republished counts the iterations published again after lostAfter without a delivery.
	republished int
	wg          sync.WaitGroup
}

// floorStream is the stream of the floor's loops.
const floorStream = "NODEFLOOR"

// startFloorLoops starts the loops on the cluster js reaches until ctx ends; stop waits for them.
func startFloorLoops(t testing.TB, ctx context.Context, js jetstream.JetStream) *floorLoops {
	t.Helper()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: floorStream, Subjects: []string{"nodefloor.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	f := &floorLoops{grew: make(chan struct{}), done: map[string]int{}}
	for p := range natsbox.Partitions {
		name := fmt.Sprintf("p%02d", p)
		cons, err := js.CreateConsumer(ctx, floorStream, jetstream.ConsumerConfig{
			Durable: name, FilterSubject: "nodefloor." + name, AckPolicy: jetstream.AckExplicitPolicy,
			AckWait: runner.DefaultAckWait, // the engine's: a delivery lost with a node comes again after it
		})
		if err != nil {
			t.Fatal(err)
		}
		f.done[name] = 0
		f.wg.Go(func() { f.loop(ctx, js, cons, name) })
	}
	return f
}

// loop runs the iterations of one loop until ctx ends. Each step is tried again until it
// succeeds, as an engine would: a publish with the iteration's message id (stored once however
// often it is sent), a fetch until the iteration comes, and its acknowledgement (given up after
// three tries: a new consumer leader may not answer it, and a message whose acknowledgement
// did not land comes again after AckWait and is acknowledged then). An iteration not delivered
// within lostAfter is published again under a new message id, and counted in republished.
func (f *floorLoops) loop(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer, name string) {
	for i := 1; ctx.Err() == nil; i++ {
		want := strconv.Itoa(i)
		for sent := 0; ; sent++ {
			if !f.publish(ctx, js, name, want, sent) {
				return
			}
			if got, ok := f.fetch(ctx, cons, want); !ok {
				return
			} else if got {
				break
			}
			f.mu.Lock()
			f.republished++
			f.mu.Unlock()
		}
		f.mu.Lock()
		f.done[name] = i
		close(f.grew)
		f.grew = make(chan struct{})
		f.mu.Unlock()
	}
}

// lostAfter is how long a floor loop fetches an iteration before it publishes it again.
const lostAfter = 30 * time.Second

// publish stores iteration want of loop name, as its sent-th publish (a new message id each),
// trying until it is stored; false when ctx ended.
func (f *floorLoops) publish(ctx context.Context, js jetstream.JetStream, name, want string, sent int) bool {
	id := name + "-" + want + "-" + strconv.Itoa(sent)
	for !try(ctx, func(ctx context.Context) error {
		_, err := js.Publish(ctx, "nodefloor."+name, []byte(want), jetstream.WithMsgID(id))
		return err
	}) {
		if ctx.Err() != nil {
			return false
		}
	}
	return true
}

// fetch fetches and acknowledges what cons delivers until iteration want comes (true) or
// lostAfter passed (false); ok is false when ctx ended.
func (f *floorLoops) fetch(ctx context.Context, cons jetstream.Consumer, want string) (got, ok bool) {
	for giveUp := time.Now().Add(lostAfter); time.Now().Before(giveUp); {
		if ctx.Err() != nil {
			return false, false
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			backoff(ctx)
			continue
		}
		for m := range batch.Messages() {
			for range 3 {
				if try(ctx, m.DoubleAck) || ctx.Err() != nil {
					break
				}
			}
			got = got || string(m.Data()) == want
		}
		if got {
			return true, true
		}
		if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			backoff(ctx)
		}
	}
	return false, ctx.Err() == nil
}

// try calls op with a second to succeed, and waits a little after a failure, so that a loop
// that has no leader to talk to does not spin on the machine's two cores.
func try(ctx context.Context, op func(context.Context) error) bool {
	octx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := op(octx); err != nil {
		backoff(ctx)
		return false
	}
	return true
}

// backoff waits 20 ms (or until ctx ends): what a retry can add to the floor.
func backoff(ctx context.Context) {
	t := time.NewTimer(20 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// at returns the last iteration acknowledged of each loop.
func (f *floorLoops) at() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	since := make(map[string]int, len(f.done))
	for k, v := range f.done {
		since[k] = v
	}
	return since
}

// past waits until every loop went through a whole iteration after since was read: it
// acknowledged the second iteration past the one it had then (the first may have been
// published before).
func (f *floorLoops) past(t testing.TB, ctx context.Context, since map[string]int) {
	t.Helper()
	for {
		f.mu.Lock()
		behind, grew := 0, f.grew
		for k, v := range since {
			if f.done[k] < v+2 {
				behind++
			}
		}
		f.mu.Unlock()
		if behind == 0 {
			return
		}
		select {
		case <-grew:
		case <-ctx.Done():
			t.Fatalf("%d loops of the floor did not go on: %v", behind, ctx.Err())
		}
	}
}

// savedPast waits until the record of every run of since in the runs bucket kv was saved at an
// iteration more than two past the one since gives, which is the last iteration the worker
// had started (startTracker.at) when since was read. The record names the iteration the
// engine dispatched last, so one past says only that the answer to an iteration started before
// was decided (run 16 counted kills that stalled every dispatch for 10 s as 70 ms that way);
// two past, that the next one, started after, was decided too; more than two past, that an
// iteration whose task was published after since was read went through the whole loop: the
// floor's "second iteration after" (floorLoops.past). The records are read every 20 ms, each
// read given 250 ms before it is sent again (a bucket electing a leader answers none).
func savedPast(t testing.TB, ctx context.Context, kv jetstream.KeyValue, since map[string]int) {
	t.Helper()
	left := maps.Clone(since)
	for len(left) > 0 {
		for id, it := range left {
			gctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
			ent, err := kv.Get(gctx, id)
			cancel()
			if err != nil {
				continue
			}
			if rec, err := runstore.DecodeRecord(ent); err == nil && rec.Run.Steps["loop"].Iteration > it+2 {
				delete(left, id)
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("%d runs saved nothing new: %v", len(left), ctx.Err())
		}
		backoff(ctx)
	}
}
