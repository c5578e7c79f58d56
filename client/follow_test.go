package client_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/protocol"
)

// follow collects what Watch after a sequence yields: the stream sequences of the events, and whether it
// ended with the finished record.
func follow(t *testing.T, ctx context.Context, c *client.Client, runID string, after uint64) (seqs []uint64, types []string, finished bool) {
	t.Helper()
	for u, err := range c.Watch(ctx, runID, client.WatchOptions{After: after}) {
		if err != nil {
			t.Fatalf("Watch after %d: %v", after, err)
		}
		if u.Event != nil {
			seqs, types = append(seqs, u.Seq), append(types, string(u.Event.Type))
		}
		if u.Record != nil && u.Record.Finished() {
			finished = true
		}
	}
	return seqs, types, finished
}

// Watch resumes after any sequence it yielded: the events after it, none missed and
// none twice, then the finished record; after the last event, or past it, only the record.
// A run that is still going is followed to its end from where the caller left off.
func TestWatchAfter(t *testing.T) {
	v := newEnv(t)
	const n = 4
	bs := runtest.LoopWorkflow(t, n)
	// Another run's events in between, so that the run's sequences are not consecutive.
	v.Worker("think").Serve(func(task *protocol.Task) *protocol.Event {
		if task.Iteration == n {
			return runtest.Completed(task, `"done"`)
		}
		return runtest.Continued(task, strconv.Itoa(task.Iteration))
	})
	v.Start(bs, "", "other")
	v.Start(bs, "", "resumed")
	v.Wait("resumed")
	v.Wait("other")
	all, types, finished := follow(t, v.Ctx, v.Client, "resumed", 0)
	if !finished || len(all) < n+1 || types[0] != string(protocol.EvStart) || !slices.IsSorted(all) {
		t.Fatalf("Follow: %v %v finished %t", all, types, finished)
	}
	last := all[len(all)-1]
	for _, tc := range []struct {
		name  string
		after uint64
		want  []uint64
	}{
		{"from the start", 0, all},
		{"after the start", all[0], all[1:]},
		{"from the middle", all[len(all)/2], all[len(all)/2+1:]},
		{"between two events of the run", all[1] + 1, wantAfter(all, all[1]+1)},
		{"after the last", last, nil},
		{"past the stream", last + 1000, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, finished := follow(t, v.Ctx, v.Client, "resumed", tc.after)
			if !slices.Equal(got, tc.want) || !finished {
				t.Errorf("Watch after %d = %v finished %t, want %v and the finished record", tc.after, got, finished, tc.want)
			}
		})
	}
	if got, err := v.Client.LastEvent(v.Ctx, "resumed"); err != nil || got != last {
		t.Errorf("LastEvent = %d, %v; want %d", got, err, last)
	}
}

func wantAfter(seqs []uint64, after uint64) []uint64 {
	var out []uint64
	for _, s := range seqs {
		if s > after {
			out = append(out, s)
		}
	}
	return out
}

// A Watch of a run in progress, stopped and resumed after the last sequence it saw, sees
// every event once.
func TestWatchAfterResumesALiveRun(t *testing.T) {
	v := newEnv(t)
	const n = 6
	bs := runtest.LoopWorkflow(t, n)
	w := v.Worker("think")
	v.Start(bs, "", "live")
	answer := func(task *protocol.Task) {
		ev := runtest.Continued(task, strconv.Itoa(task.Iteration))
		if task.Iteration == n {
			ev = runtest.Completed(task, `"done"`)
		}
		v.Publish(ev, task.MsgID+"/answer")
	}
	answer(w.Next())
	answer(w.Next())
	// Read what is there, then stop.
	ctx, cancel := context.WithTimeout(v.Ctx, 2*time.Second)
	var seen []uint64
	for u, err := range v.Client.Watch(ctx, "live", client.WatchOptions{After: 0}) {
		if err != nil {
			break
		}
		if u.Event != nil {
			seen = append(seen, u.Seq)
		}
		if u.Record != nil {
			break // the record of now: every event up to it was yielded
		}
	}
	cancel()
	if len(seen) == 0 {
		t.Fatal("no event before the first record")
	}
	go func() {
		for i := 3; i <= n; i++ {
			answer(w.Next())
		}
	}()
	rest, _, finished := follow(t, v.Ctx, v.Client, "live", seen[len(seen)-1])
	all, _, _ := follow(t, v.Ctx, v.Client, "live", 0)
	if got := append(slices.Clone(seen), rest...); !slices.Equal(got, all) || !finished {
		t.Errorf("read %v then %v (finished %t), want %v", seen, rest, finished, all)
	}
}

// A Watch of a run that goes on ends with ctx's error once ctx is done, every time.
func TestWatchEndsWithCtx(t *testing.T) {
	v := newEnv(t)
	v.Start(runtest.LoopWorkflow(t, 3), "", "idle") // no worker: the run stays running
	for i := range 20 {
		ctx, cancel := context.WithCancel(v.Ctx)
		ended := make(chan error, 1)
		go func() {
			var last error
			for u, err := range v.Client.Watch(ctx, "idle", client.WatchOptions{After: 0}) {
				if err != nil {
					last = err
				}
				if u.Record != nil {
					cancel() // after the first record: the pumps are running
				}
			}
			ended <- last
		}()
		select {
		case err := <-ended:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("try %d: Watch ended with %v, want context.Canceled", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("try %d: Watch did not end after its context was cancelled", i)
		}
		cancel()
	}
}
