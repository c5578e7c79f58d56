package suggest

import "testing"

func TestClosest(t *testing.T) {
	known := []string{"investigate", "route", "recommend", "read_order", "read_delivery_status"}
	for _, tc := range []struct{ name, want string }{
		{"investigat", "investigate"},
		{"invsetigate", "investigate"},
		{"rout", "route"},
		{"read_ordr", "read_order"},
		{"route", ""},     // itself: nothing to suggest
		{"summarize", ""}, // nothing near
		{"rte", ""},       // short names allow one edit only
		{"read_orders", "read_order"},
	} {
		if got := Closest(tc.name, known); got != tc.want {
			t.Errorf("Closest(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func FuzzDistance(f *testing.F) {
	f.Add("kitten", "sitting")
	f.Add("", "abc")
	f.Fuzz(func(t *testing.T, a, b string) {
		d := Distance(a, b)
		if len(a) > 64 || len(b) > 64 {
			return
		}
		if d != Distance(b, a) || d < max(len(a), len(b))-min(len(a), len(b)) || d > max(len(a), len(b)) || (d == 0) != (a == b) {
			t.Fatalf("Distance(%q, %q) = %d breaks a property of the edit distance", a, b, d)
		}
	})
}
