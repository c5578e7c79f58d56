package fault_test

import (
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/fault"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  int64
		bad   bool
	}{
		{"", 0, false},
		{"kill-before-save:6", 6, false},
		{"kill-before-save:0", 0, true},
		{"kill-before-save:x", 0, true},
		{"kill-after-save:1", 0, true},
	} {
		n, err := fault.Parse(tc.value, "kill-before-save")
		if n != tc.want || (err != nil) != tc.bad || err != nil && !strings.Contains(err.Error(), "REINS_FAULT") {
			t.Errorf("%q: %d, %v", tc.value, n, err)
		}
	}
}
