package promtest_test

import (
	"testing"

	"github.com/reins-run/reins/internal/testkit/promtest"
)

// TestValue: a sample is found by its exact label set in any order, a histogram by its count;
// a subset or superset of its labels finds nothing.
func TestValue(t *testing.T) {
	fams, err := promtest.Parse(`# TYPE c counter
c{a="1",b="2"} 3
c{a="1"} 4
# TYPE g gauge
g 5
# TYPE h histogram
h_bucket{le="+Inf"} 6
h_sum 1
h_count 6
`)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		labels []string
		want   float64
		ok     bool
	}{
		{"c", []string{"a", "1", "b", "2"}, 3, true},
		{"c", []string{"b", "2", "a", "1"}, 3, true},
		{"c", []string{"a", "1"}, 4, true},
		{"c", []string{"b", "2"}, 0, false},
		{"c", []string{"a", "1", "b", "2", "c", "3"}, 0, false},
		{"g", nil, 5, true},
		{"h", nil, 6, true},
		{"missing", nil, 0, false},
	}
	for _, c := range cases {
		if got, ok := promtest.Value(fams, c.name, c.labels...); got != c.want || ok != c.ok {
			t.Errorf("Value(%s, %v) = %v, %v; want %v, %v", c.name, c.labels, got, ok, c.want, c.ok)
		}
	}
	if _, err := promtest.Parse("c{a=1} x"); err == nil {
		t.Error("Parse of a broken scrape: no error")
	}
}
