package main

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestDrifted(t *testing.T) {
	yes := []bool{true, true}
	for _, tc := range []struct {
		name   string
		dir    direction
		ratios []float64
		have   []bool
		want   bool
	}{
		{"a cost 6% worse in both rounds", lowerIsBetter, []float64{1.06, 1.07}, yes, true},
		{"a cost 6% worse in one round only", lowerIsBetter, []float64{1.06, 1.04}, yes, false},
		{"a cost exactly 5% worse", lowerIsBetter, []float64{1.05, 1.05}, yes, false},
		{"a cost better", lowerIsBetter, []float64{0.80, 0.70}, yes, false},
		{"a throughput 6% lower in both rounds", higherIsBetter, []float64{0.94, 0.93}, yes, true},
		{"a throughput 4% lower", higherIsBetter, []float64{0.96, 0.96}, yes, false},
		{"a throughput higher", higherIsBetter, []float64{1.30, 1.25}, yes, false},
		{"a cost worse, not measured in round 2", lowerIsBetter, []float64{1.5, 0}, []bool{true, false}, false},
		{"the floor, slower", informative, []float64{1.5, 1.5}, yes, false},
		{"one round, worse", lowerIsBetter, []float64{1.10}, []bool{true}, true},
		{"no rounds", lowerIsBetter, nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := drifted(tc.dir, tc.ratios, tc.have); got != tc.want {
				t.Errorf("drifted(%v, %v) = %v, want %v", tc.dir, tc.ratios, got, tc.want)
			}
		})
	}
}

// canned is a run of the three benchmarks with the given figures.
func canned(floorNs, p50, p99 float64, allocs int64, cpuOne, itersPerS, cpu64 float64, allocs64 int64) results {
	return results{
		benchFloor: {Name: benchFloor, NsPerOp: floorNs, AllocsPerOp: 165},
		benchOne: {Name: benchOne, AllocsPerOp: allocs,
			Extra: map[string]float64{"p50/floor": p50, "p99/floor": p99, "cpu-ns/iteration": cpuOne}},
		bench64: {Name: bench64, AllocsPerOp: allocs64, Extra: map[string]float64{"iterations/s": itersPerS, "cpu-ns/iteration": cpu64}},
	}
}

// The issue's own A/B (89af8b1 against main, two rounds): throughput and CPU per iteration of
// the 64 loops are flagged, and so are p50 and p99; the floor never is.
func TestCompareTheIssuesAB(t *testing.T) {
	rounds := []round{
		{base: canned(100e3, 1.36, 6.9, 244, 300e3, 13870, 136e3, 221), tree: canned(110e3, 1.77, 8.6, 250, 310e3, 10490, 172e3, 221)},
		{base: canned(100e3, 1.66, 8.5, 244, 300e3, 13210, 138e3, 221), tree: canned(90e3, 1.96, 9.2, 250, 290e3, 10080, 172e3, 221)},
	}
	rows := compare(rounds)
	got := map[string]bool{}
	for _, r := range rows {
		got[r.fig.label] = r.flagged
	}
	want := map[string]bool{
		"floor, µs per message":       false,
		"one loop, p50 / floor":       true,
		"one loop, p99 / floor":       true,
		"one loop, p99 / floor's p99": false, // the base did not measure it
		"one loop, allocs/iteration":  false, // 2.5% more
		"one loop, CPU µs/iteration":  false, // worse in round 1 only
		"64 loops, iterations/s":      true,
		"64 loops, CPU µs/iteration":  true,
	}
	for label, w := range want {
		if got[label] != w {
			t.Errorf("%s: flagged %v, want %v", label, got[label], w)
		}
	}
	if len(rows) != len(want) {
		t.Errorf("%d rows, want %d", len(rows), len(want))
	}
	its := rows[slices.IndexFunc(rows, func(r row) bool { return r.fig.label == "64 loops, iterations/s" })]
	if its.fig.label != "64 loops, iterations/s" || cells(its.ratios, its.have, fixed(3)) != "0.756 / 0.763" {
		t.Errorf("%s ratios %v, want 0.756 / 0.763", its.fig.label, its.ratios)
	}
}

func TestPrintTable(t *testing.T) {
	base := canned(100e3, 1.5, 7, 244, 300e3, 13000, 140e3, 221)
	tree := canned(100e3, 1.5, 7, 244, 300e3, 11000, 140e3, 221)
	delete(tree[benchOne].Extra, "cpu-ns/iteration") // a platform without process CPU time
	var b strings.Builder
	err := printTable(&b, header{base: "89af8b1 (89af8b10d354)", tree: "4b6eb24", rounds: 2, benchtime: "1s"},
		compare([]round{{base, tree}, {base, tree}}))
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"A/B of reins bench --only jetstream_floor,agent_loop_iteration,agent_loop_64 --json --benchtime 1s; base 89af8b1 (89af8b10d354), tree 4b6eb24; 2 round(s)",
		"| figure | base, rounds 1 / 2 | tree, rounds 1 / 2 | tree/base, rounds 1 / 2 | tree/base, median | verdict |",
		"| 64 loops, iterations/s | 13,000 / 13,000 | 11,000 / 11,000 | 0.846 / 0.846 | 0.846 | " + verdictDrift + " |",
		"| one loop, p50 / floor | 1.50× / 1.50× | 1.50× / 1.50× | 1.000 / 1.000 | 1.000 | ok |",
		"| one loop, CPU µs/iteration | 300 / 300 | — / — | — / — | — | not measured in every round |",
		"| floor, µs per message | 100.0 / 100.0 | 100.0 / 100.0 | 1.000 / 1.000 | 1.000 | (the machine's, not judged) |",
		"Flagged: 1 (more than 5% worse than the base in every round",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "One round is no verdict") {
		t.Errorf("two rounds called no verdict:\n%s", out)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ratios []float64
		have   []bool
		want   float64
	}{
		{"odd count", []float64{1.3, 0.9, 1.1}, []bool{true, true, true}, 1.1},
		{"even count: the mean of the middle two", []float64{1.62, 1.02, 0.98, 1.10}, []bool{true, true, true, true}, 1.06},
		{"a round not measured is left out", []float64{0.5, 0, 1.2}, []bool{true, false, true}, 0.85},
		{"none measured", []float64{0, 0}, []bool{false, false}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := median(tc.ratios, tc.have); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("median(%v, %v) = %v, want %v", tc.ratios, tc.have, got, tc.want)
			}
		})
	}
}

func TestThousands(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 13870.4: "13,870", 1234567: "1,234,567", -1500: "-1,500"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%v) = %q, want %q", in, got, want)
		}
	}
}
