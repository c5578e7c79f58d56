package defaults

import (
	"testing"
	"time"
)

func TestOrNone(t *testing.T) {
	for _, tc := range []struct{ v, def, want int }{
		{0, 10, 10},
		{-1, 10, 0},
		{-100, 10, 0},
		{3, 10, 3},
		{30, 10, 30},
	} {
		if got := OrNone(tc.v, tc.def); got != tc.want {
			t.Errorf("OrNone(%d, %d) = %d, want %d", tc.v, tc.def, got, tc.want)
		}
	}
	if got := OrNone(time.Duration(0), time.Hour); got != time.Hour {
		t.Errorf("OrNone(0, 1h) = %s, want 1h", got)
	}
	if got := OrNone(-time.Second, time.Hour); got != 0 {
		t.Errorf("OrNone(-1s, 1h) = %s, want 0", got)
	}
}
