package natsbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream's "temporarily unavailable", as each of nats.go's APIs returns it.
var (
	jsUnavailable     = &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	legacyUnavailable = &nats.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
)

// TestUnavailable tells JetStream's "temporarily unavailable", from either API and wrapped,
// from its other answers.
func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{jsUnavailable, true},
		{legacyUnavailable, true},
		{fmt.Errorf("read a>: %w", legacyUnavailable), true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10039}, false},
		{&nats.APIError{Code: 404, ErrorCode: 10059}, false},
		{jetstream.ErrBucketNotFound, false},
		{nats.ErrTimeout, false},
		{nil, false},
	} {
		if got := unavailable(tc.err); got != tc.want {
			t.Errorf("unavailable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// shortAttempts makes apiAttempt short for one test: what is tested is what happens after an
// attempt gets no answer, not how long one waits.
func shortAttempts(t *testing.T) {
	old := apiAttempt
	apiAttempt = 20 * time.Millisecond
	t.Cleanup(func() { apiAttempt = old })
}

// A request that gets no answer within its attempt is asked again; one that fails otherwise,
// or succeeds, is not; once ctx ends, the last error is returned.
func TestRetry(t *testing.T) {
	shortAttempts(t)
	lost := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	for _, tc := range []struct {
		name     string
		outcomes []func(context.Context) error
		want     error
		calls    int
	}{
		{"answered at once", []func(context.Context) error{func(context.Context) error { return nil }}, nil, 1},
		{"lost twice, then answered", []func(context.Context) error{lost, lost, func(context.Context) error { return nil }}, nil, 3},
		{"a timeout of nats.go is lost too", []func(context.Context) error{func(context.Context) error { return nats.ErrTimeout }, func(context.Context) error { return nil }}, nil, 2},
		{"another error is the answer", []func(context.Context) error{func(context.Context) error { return jetstream.ErrBucketNotFound }}, jetstream.ErrBucketNotFound, 1},
		{"JetStream unavailable while it elects, then answered", []func(context.Context) error{
			func(context.Context) error { return jsUnavailable },
			func(context.Context) error { return fmt.Errorf("watch: %w", legacyUnavailable) },
			func(context.Context) error { return nil },
		}, nil, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call, calls := script(tc.outcomes)
			err := Retry(testCtx(t), call)
			if !errors.Is(err, tc.want) && err != tc.want || *calls != tc.calls {
				t.Errorf("Retry: %v after %d calls, want %v after %d", err, *calls, tc.want, tc.calls)
			}
		})
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	calls := 0
	err := Retry(ctx, func(ctx context.Context) error {
		if calls++; calls == 3 {
			cancel()
		}
		return lost(ctx)
	})
	if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) || calls != 3 {
		t.Errorf("Retry with its context ended: %v after %d calls, want the last attempt's error after 3", err, calls)
	}
	// Without a deadline, a server that never answers is an error after unboundedAttempts.
	calls = 0
	err = Retry(context.Background(), func(ctx context.Context) error { calls++; return lost(ctx) })
	if !errors.Is(err, context.DeadlineExceeded) || calls < 2 || calls > unboundedAttempts+1 {
		t.Errorf("Retry without a deadline, never answered: %v after %d calls, want an error after at most %d", err, calls, unboundedAttempts+1)
	}
}

// A watch whose start gets no answer is abandoned (its context cancelled, so that the library
// stops it) and started again; the watch returned lives on the caller's context.
func TestStartWatch(t *testing.T) {
	shortAttempts(t)
	ctx := testCtx(t)
	var abandoned []context.Context
	starts := 0
	w, stop, err := StartWatch(ctx, func(wctx context.Context) (jetstream.KeyWatcher, error) {
		if starts++; starts < 3 {
			abandoned = append(abandoned, wctx)
			<-wctx.Done()
			return nil, wctx.Err()
		}
		return fakeWatcher{}, nil
	})
	if err != nil || w == nil || starts != 3 {
		t.Fatalf("StartWatch: %v, %d starts; want a watcher after 3", err, starts)
	}
	for i, c := range abandoned {
		if c.Err() == nil {
			t.Errorf("start %d was abandoned without cancelling its context", i+1)
		}
	}
	stop()
	// A watch JetStream refused while it elects a leader is started again; another refusal is
	// the answer.
	starts = 0
	w, stop, err = StartWatch(ctx, func(context.Context) (jetstream.KeyWatcher, error) {
		if starts++; starts < 3 {
			return nil, legacyUnavailable
		}
		return fakeWatcher{}, nil
	})
	if err != nil || w == nil || starts != 3 {
		t.Fatalf("StartWatch while JetStream is unavailable: %v, %d starts; want a watcher after 3", err, starts)
	}
	stop()
	if _, _, err := StartWatch(ctx, func(context.Context) (jetstream.KeyWatcher, error) { return nil, jetstream.ErrBucketNotFound }); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("StartWatch refused: %v, want the refusal", err)
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := StartWatch(gone, func(wctx context.Context) (jetstream.KeyWatcher, error) {
		<-wctx.Done()
		return nil, wctx.Err()
	}); !errors.Is(err, context.Canceled) {
		t.Errorf("StartWatch with its context ended: %v, want context.Canceled", err)
	}
}

type fakeWatcher struct{ jetstream.KeyWatcher }

// MissingFromLeader names the keys the leader holds as values that a listing did not see; a
// purged or deleted key is not missing.
func TestMissingFromLeader(t *testing.T) {
	b, kv := runsBucket(t)
	ctx := testCtx(t)
	for _, k := range []string{"s.1.0", "s.2.0", "s.3.0", "s.4.0", "other.1.0"} {
		if _, err := kv.Put(ctx, k, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Purge(ctx, "s.3.0"); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "s.4.0"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		seen map[string]bool
		want []string
	}{
		{map[string]bool{"s.1.0": true, "s.2.0": true}, nil},
		{map[string]bool{"s.1.0": true}, []string{"s.2.0"}},
		{map[string]bool{}, []string{"s.1.0", "s.2.0"}},
	} {
		got, err := MissingFromLeader(ctx, b.JetStream(), RunsBucket, "s.>", func(k string) bool { return tc.seen[k] })
		keys := slices.Sorted(maps.Keys(got))
		if err != nil || !slices.Equal(keys, tc.want) {
			t.Errorf("MissingFromLeader(seen %v) = %v, %v; want %v", tc.seen, keys, err, tc.want)
		}
		for k, v := range got {
			if string(v) != "v" {
				t.Errorf("the leader's value of %s is %q, want %q", k, v, "v")
			}
		}
	}
}

// A write is asked again both when its request goes unanswered (a stream between leaders) and
// when no stream answers at all; any other error, or success, is the answer.
func TestRetryWrite(t *testing.T) {
	shortAttempts(t)
	lost := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	noStream := func(context.Context) error { return jetstream.ErrNoStreamResponse }
	ok := func(context.Context) error { return nil }
	for _, tc := range []struct {
		name     string
		outcomes []func(context.Context) error
		want     error
		calls    int
	}{
		{"written at once", []func(context.Context) error{ok}, nil, 1},
		{"unanswered, then no stream, then written", []func(context.Context) error{lost, noStream, ok}, nil, 3},
		{"refused", []func(context.Context) error{func(context.Context) error { return jetstream.ErrKeyExists }}, jetstream.ErrKeyExists, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call, calls := script(tc.outcomes)
			err := RetryWrite(testCtx(t), call)
			if !errors.Is(err, tc.want) && err != tc.want || *calls != tc.calls {
				t.Errorf("RetryWrite: %v after %d calls, want %v after %d", err, *calls, tc.want, tc.calls)
			}
		})
	}
}

// script returns a call that answers with outcomes in turn (the last one again once they are
// used up), and the number of calls made.
func script(outcomes []func(context.Context) error) (func(context.Context) error, *int) {
	calls := new(int)
	return func(ctx context.Context) error {
		f := outcomes[min(*calls, len(outcomes)-1)]
		*calls++
		return f(ctx)
	}, calls
}
