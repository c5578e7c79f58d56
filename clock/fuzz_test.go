package clock_test

import (
	"testing"

	"github.com/reins-run/reins/clock"
)

// FuzzDuration: parsing never panics, never yields a negative duration, and what it accepts
// survives a round trip through MarshalText.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{"30s", "500ms", "1h30m", "-1s", "", "abc", "9999999999999h", "1.5h", "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var d clock.Duration
		if err := d.UnmarshalText([]byte(s)); err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("%q parsed to a negative duration %v", s, d)
		}
		text, err := d.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back clock.Duration
		if err := back.UnmarshalText(text); err != nil || back != d {
			t.Fatalf("%q → %v → %q → %v (%v)", s, d, text, back, err)
		}
	})
}
