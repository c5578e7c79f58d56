package mdtest

import "testing"

// TestAnchor: headings become the anchors GitHub gives them.
func TestAnchor(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Several terminals on one data directory", "several-terminals-on-one-data-directory"},
		{"`reins runs list`", "reins-runs-list"},
		{"GET /v1/workflows/{name}", "get-v1workflowsname"},
		{"snake_case and hyphen-ated", "snake_case-and-hyphen-ated"},
		{"Übersicht: 2 Wörter", "übersicht-2-wörter"},
	} {
		if got := Anchor(tc.heading); got != tc.want {
			t.Errorf("Anchor(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}
