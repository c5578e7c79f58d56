package operator_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/reins-run/reins/operator"
)

// TestConsumersCap: [limits] max_consumers_per_principal is a whole number of consumers from 1
// to MaxConsumersCap; left out, it is 0 (the server's default).
func TestConsumersCap(t *testing.T) {
	for _, tc := range []struct {
		file string
		want int
		bad  string
	}{
		{"[limits]\nmax_consumers_per_principal = 8\n", 8, ""},
		{"[limits]\nmax_input_bytes = 10\n", 0, ""},
		{"[limits]\nmax_consumers_per_principal = 0\n", 0, "bad.toml:2: key limits.max_consumers_per_principal: want a whole number of consumers from 1 to 100000"},
		{"[limits]\nmax_consumers_per_principal = 1000001\n", 0, "bad.toml:2: key limits.max_consumers_per_principal: want a whole number of consumers from 1 to 100000"},
		{"[limits]\nmax_consumers_per_principal = \"64\"\n", 0, "bad.toml:2: key limits.max_consumers_per_principal: want a whole number of consumers, such as 64"},
	} {
		cfg, err := operator.Parse("bad.toml", []byte(tc.file))
		if tc.bad == "" {
			if err != nil || cfg.Limits.MaxConsumersPerPrincipal != tc.want {
				t.Errorf("%q: %v, cap %d; want %d", tc.file, err, cfg.Limits.MaxConsumersPerPrincipal, tc.want)
			}
			continue
		}
		var ps operator.Problems
		if !errors.As(err, &ps) || len(ps) != 1 || !strings.HasPrefix(ps[0].String(), tc.bad) {
			t.Errorf("%q: %v; want %q", tc.file, err, tc.bad)
		}
	}
}
