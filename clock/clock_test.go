package clock_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/clock"
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Both clocks satisfy the interface the loop depends on.
var (
	_ clock.Clock = clock.Real{}
	_ clock.Clock = (*clock.Virtual)(nil)
)

func TestVirtualSleepAdvancesWithoutWaiting(t *testing.T) {
	v := clock.NewVirtual(start)
	if got := v.Now(); !got.Equal(start) {
		t.Fatalf("Now() = %v, want the start %v", got, start)
	}
	// An hour of virtual sleep: if Sleep waited for real, the test would time out.
	realBefore := time.Now()
	if err := v.Sleep(context.Background(), time.Hour); err != nil {
		t.Fatalf("Sleep: %v", err)
	}
	if err := v.Sleep(context.Background(), 1500*time.Millisecond); err != nil {
		t.Fatalf("Sleep: %v", err)
	}
	if got, want := v.Now(), start.Add(time.Hour+1500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("Now() after sleeping = %v, want %v", got, want)
	}
	// Sanity check, not a timing assertion: the real clock cannot have moved by an hour.
	if real := time.Since(realBefore); real >= time.Hour {
		t.Fatalf("virtual Sleep took %v of real time", real)
	}
}

func TestVirtualSleepRespectsDoneContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() context.Context
		want error
	}{
		{"cancelled", func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, context.Canceled},
		{"deadline exceeded", func() context.Context {
			ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
			t.Cleanup(cancel)
			return ctx
		}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := clock.NewVirtual(start)
			err := v.Sleep(tc.ctx(), time.Minute)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Sleep on a done context = %v, want %v", err, tc.want)
			}
			if got := v.Now(); !got.Equal(start) {
				t.Fatalf("Sleep on a done context moved the clock to %v", got)
			}
		})
	}
}

func TestVirtualAdvance(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []time.Duration
		want  time.Duration
	}{
		{"positive", []time.Duration{time.Second, 2 * time.Second}, 3 * time.Second},
		{"zero", []time.Duration{0}, 0},
		{"negative ignored", []time.Duration{5 * time.Second, -time.Hour, time.Second}, 6 * time.Second},
		{"only negative", []time.Duration{-time.Nanosecond}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := clock.NewVirtual(start)
			for _, d := range tc.steps {
				v.Advance(d)
			}
			if got := v.Now().Sub(start); got != tc.want {
				t.Fatalf("elapsed = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestVirtualConcurrentSleepsAddUp(t *testing.T) {
	v := clock.NewVirtual(start)
	const n = 50
	done := make(chan error, n)
	for range n {
		go func() { done <- v.Sleep(context.Background(), time.Second) }()
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got := v.Now().Sub(start); got != n*time.Second {
		t.Fatalf("elapsed after %d concurrent one-second sleeps = %v, want %v", n, got, n*time.Second)
	}
}

func TestVirtualWithDeadlineReturnsContextUnchanged(t *testing.T) {
	v := clock.NewVirtual(start)
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, "x")
	ctx, cancel := v.WithDeadline(parent, start.Add(-time.Hour))
	defer cancel()
	if ctx != parent {
		t.Fatal("Virtual.WithDeadline should return the context unchanged")
	}
	if ctx.Err() != nil {
		t.Fatalf("a virtual deadline must not cancel anything, ctx.Err() = %v", ctx.Err())
	}
}

func TestRealSleepReturnsContextError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, d := range []time.Duration{0, -time.Second, time.Hour} {
		if err := (clock.Real{}).Sleep(ctx, d); !errors.Is(err, context.Canceled) {
			t.Errorf("Real.Sleep(cancelled, %v) = %v, want context.Canceled", d, err)
		}
	}
	// Not cancelled, nothing to wait for.
	if err := (clock.Real{}).Sleep(context.Background(), 0); err != nil {
		t.Errorf("Real.Sleep(background, 0) = %v, want nil", err)
	}
}

func TestRealWithDeadline(t *testing.T) {
	ctx, cancel := (clock.Real{}).WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	<-ctx.Done() // a deadline in the past is already done
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("ctx.Err() = %v, want DeadlineExceeded", ctx.Err())
	}
}

func TestDurationUnmarshalText(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Duration
		wantErr string // substring of the error; empty for success
	}{
		{in: "500ms", want: 500 * time.Millisecond},
		{in: "30s", want: 30 * time.Second},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "0s", want: 0},
		{in: "abc", wantErr: `"abc" is not a duration`},
		{in: "", wantErr: `"" is not a duration`},
		{in: "30", wantErr: `"30" is not a duration`},
		{in: "-1s", wantErr: `duration "-1s" is negative`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var d clock.Duration
			err := d.UnmarshalText([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("UnmarshalText(%q) = nil, want an error containing %q (value %v)", tc.in, tc.wantErr, d)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("UnmarshalText(%q) error = %q, want it to contain %q", tc.in, err, tc.wantErr)
				}
				if d != 0 {
					t.Fatalf("a failed UnmarshalText changed the value to %v", d)
				}
				return
			}
			if err != nil {
				t.Fatalf("UnmarshalText(%q): %v", tc.in, err)
			}
			if d.Std() != tc.want {
				t.Fatalf("UnmarshalText(%q) = %v, want %v", tc.in, d.Std(), tc.want)
			}
		})
	}
}

func TestDurationTextRoundTrip(t *testing.T) {
	for _, want := range []time.Duration{0, time.Nanosecond, 500 * time.Millisecond, 30 * time.Second, 90 * time.Minute, 1234567 * time.Microsecond} {
		b, err := clock.Duration(want).MarshalText()
		if err != nil {
			t.Fatalf("MarshalText(%v): %v", want, err)
		}
		if string(b) != want.String() {
			t.Errorf("MarshalText(%v) = %q, want %q", want, b, want.String())
		}
		var got clock.Duration
		if err := got.UnmarshalText(b); err != nil {
			t.Fatalf("UnmarshalText(%q): %v", b, err)
		}
		if got.Std() != want {
			t.Errorf("round trip of %v gave %v", want, got.Std())
		}
	}
}

func TestDurationJSON(t *testing.T) {
	var v struct {
		D clock.Duration  `json:"d"`
		P *clock.Duration `json:"p"`
	}
	if err := json.Unmarshal([]byte(`{"d": "1h30m", "p": "250ms"}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.D.Std() != 90*time.Minute || v.P == nil || v.P.Std() != 250*time.Millisecond {
		t.Fatalf("decoded %v and %v, want 1h30m0s and 250ms", v.D, v.P)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"d":"1h30m0s","p":"250ms"}`; string(b) != want {
		t.Fatalf("json.Marshal = %s, want %s", b, want)
	}
	if err := json.Unmarshal([]byte(`{"d": "-5m"}`), &v); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("decoding a negative duration: err = %v, want a 'negative' error", err)
	}
}
