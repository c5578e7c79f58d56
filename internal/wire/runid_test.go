package wire_test

import (
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/wire"
)

// TestCheckClientRunID: a client may choose a run id CheckRunID takes, but none in the space of
// the ids the server gives (triggers', sub-runs', forks'); the refusal names the rule.
func TestCheckClientRunID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want string // "" when a client may choose it
	}{
		{"refund-A-1", ""},
		{"r-jkqceekiwrndor7gahfq", ""},
		{"T-upper", ""},     // ids are case-sensitive: not a trigger's
		{"at-1", ""},        // "t-" only at the start
		{"fork-1", ""},      // a fork's id is RUN-fork-N, with a run before it
		{"run-fork-", ""},   // no N
		{"run-fork-1a", ""}, // N is digits
		{"run-forks-1", ""},
		{"t-on-order-aaaaaaaaaaaaaaaaaaaa", `begins with "t-" names a run of a trigger`},
		{"t-", `begins with "t-"`},
		{"refund-1-fork-1", "ends in \"-fork-N\" names a fork"},
		{"a-fork-1-fork-22", "ends in \"-fork-N\""},
		{"run/ask/1", "an id with '/' names a sub-run"},
		{"a.b", `the character '.' at byte 1`},
		{"", "want 1 to 64 characters"},
		{strings.Repeat("a", wire.MaxRunIDLen+1), "want 1 to 64 characters"},
	} {
		err := wire.CheckClientRunID(tc.id)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckClientRunID(%q): %v", tc.id, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckClientRunID(%q) = %v, want an error with %q", tc.id, err, tc.want)
		case err != nil && strings.Count(err.Error(), ": ") > 1:
			t.Errorf("CheckClientRunID(%q) = %q: want one sentence", tc.id, err)
		}
	}
}

// FuzzCheckClientRunID: an id a client may choose is a run id CheckRunID takes, and in none of
// the server's spaces: no "t-" prefix, no '/', no -fork-N ending.
func FuzzCheckClientRunID(f *testing.F) {
	for _, s := range []string{"refund-1", "t-x", "a/b", "r-fork-1", "r-fork-", "fork-1", "", "é", strings.Repeat("x", 65)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if wire.CheckClientRunID(id) != nil {
			return
		}
		if wire.CheckRunID(id) != nil {
			t.Fatalf("CheckClientRunID accepted %q, which CheckRunID refuses", id)
		}
		if strings.HasPrefix(id, "t-") || strings.Contains(id, "/") {
			t.Fatalf("CheckClientRunID accepted %q, in the space of triggers' or sub-runs' ids", id)
		}
		if i := strings.LastIndex(id, "-fork-"); i > 0 && strings.Trim(id[i+6:], "0123456789") == "" && len(id) > i+6 {
			t.Fatalf("CheckClientRunID accepted %q, a fork's id", id)
		}
	})
}
