package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// The benchmarks abbench runs: the floor and the hot path.
const (
	benchFloor = "jetstream_floor"
	benchOne   = "agent_loop_iteration"
	bench64    = "agent_loop_64"
)

var benchmarks = []string{benchFloor, benchOne, bench64}

// tolerance is how much worse than the base a figure may be in every round before it needs a
// cause written down or a fix (BENCHMARKS.md, "Drift against the baseline").
const tolerance = 0.05

// direction says which way a figure improves.
type direction int

const (
	lowerIsBetter direction = iota
	higherIsBetter
	// informative figures are shown and their ratio printed, but never flagged: the floor
	// measures the machine as much as the code.
	informative
)

// figure is one row of the table: a value read from one benchmark's result.
type figure struct {
	label  string
	bench  string
	dir    direction
	format func(float64) string
	value  func(result) (float64, bool)
}

func extra(key string, scale float64) func(result) (float64, bool) {
	return func(r result) (float64, bool) {
		v, ok := r.Extra[key]
		return v * scale, ok
	}
}

func allocs(r result) (float64, bool) { return float64(r.AllocsPerOp), true }

func nsPerOpMicros(r result) (float64, bool) { return r.NsPerOp / 1e3, r.NsPerOp > 0 }

// figures are the hot path's figures of BENCHMARKS.md, in the order the table prints them.
// agent_loop_64's allocs_per_op is not among them: it is per op, and an op is not an
// iteration when Measure stops at few ops (each op runs at least 6,400 iterations).
var figures = []figure{
	{"floor, µs per message", benchFloor, informative, fixed(1), nsPerOpMicros},
	{"one loop, p50 / floor", benchOne, lowerIsBetter, times, extra("p50/floor", 1)},
	{"one loop, p99 / floor", benchOne, lowerIsBetter, times, extra("p99/floor", 1)},
	{"one loop, p99 / floor's p99", benchOne, lowerIsBetter, times, extra("p99/floor-p99", 1)},
	{"one loop, allocs/iteration", benchOne, lowerIsBetter, fixed(0), allocs},
	{"one loop, CPU µs/iteration", benchOne, lowerIsBetter, fixed(0), extra("cpu-ns/iteration", 1e-3)},
	{"64 loops, iterations/s", bench64, higherIsBetter, thousands, extra("iterations/s", 1)},
	{"64 loops, CPU µs/iteration", bench64, lowerIsBetter, fixed(0), extra("cpu-ns/iteration", 1e-3)},
	// --test-binaries: a fixed number of iterations, so allocs/op is per iteration.
	{"64 loops, test binaries, iterations/s", benchTest64, higherIsBetter, thousands, extra("iterations/s", 1)},
	{"64 loops, test binaries, CPU µs/iteration", benchTest64, lowerIsBetter, fixed(0), extra("cpu-ns/iteration", 1e-3)},
	{"64 loops, test binaries, allocs/iteration", benchTest64, lowerIsBetter, fixed(0), allocs},
}

// round is one round's runs of both binaries.
type round struct{ base, tree results }

// of returns where the results of side ("base" or "tree") go in rd.
func (rd *round) of(side string) *results {
	if side == "tree" {
		return &rd.tree
	}
	return &rd.base
}

// add adds rs to the results of side in rd, beside those a run of the round put there before.
func (rd *round) add(side string, rs results) {
	m := rd.of(side)
	if *m == nil {
		*m = results{}
	}
	for name, r := range rs {
		(*m)[name] = r
	}
}

// row is one figure across the rounds: its values, ratios tree/base (0 where a value is
// missing), their median, and whether it drifted.
type row struct {
	fig            figure
	base, tree     []float64
	baseOK, treeOK []bool
	have           []bool // both measured, and the base above 0: the ratio is known
	ratios         []float64
	median         float64 // of the known ratios; 0 when none is
	flagged        bool
}

// compare builds the table's rows from the rounds.
func compare(rounds []round) []row {
	rows := make([]row, 0, len(figures))
	for _, f := range figures {
		if !ranAny(rounds, f.bench) {
			continue // the test binaries' rows, without --test-binaries
		}
		r := row{fig: f}
		for _, rd := range rounds {
			b, okB := f.value(rd.base[f.bench])
			t, okT := f.value(rd.tree[f.bench])
			ok := okB && okT && b > 0
			ratio := 0.0
			if ok {
				ratio = t / b
			}
			r.base, r.tree = append(r.base, b), append(r.tree, t)
			r.baseOK, r.treeOK = append(r.baseOK, okB), append(r.treeOK, okT)
			r.have, r.ratios = append(r.have, ok), append(r.ratios, ratio)
		}
		r.flagged = drifted(f.dir, r.ratios, r.have)
		r.median = median(r.ratios, r.have)
		rows = append(rows, r)
	}
	return rows
}

// median returns the median of the ratios that have says are known (the mean of the middle
// two for an even count), 0 when none is. On a machine whose speed swings between two runs
// of the same binary, one round says little; the median of several says how the tree and the
// base compare in most of them, which the verdict, asking for every round, does not.
func median(ratios []float64, have []bool) float64 {
	var known []float64
	for i, q := range ratios {
		if have[i] {
			known = append(known, q)
		}
	}
	if len(known) == 0 {
		return 0
	}
	slices.Sort(known)
	n := len(known)
	if n%2 == 1 {
		return known[n/2]
	}
	return (known[n/2-1] + known[n/2]) / 2
}

// ranAny reports whether benchmark bench has a result in any round, of either side.
func ranAny(rounds []round, bench string) bool {
	for _, rd := range rounds {
		if _, ok := rd.base[bench]; ok {
			return true
		}
		if _, ok := rd.tree[bench]; ok {
			return true
		}
	}
	return false
}

// drifted reports whether a figure is more than tolerance worse than the base in every round
// (and was measured in every round).
func drifted(dir direction, ratios []float64, have []bool) bool {
	if dir == informative || len(ratios) == 0 {
		return false
	}
	for i, q := range ratios {
		if !have[i] || !worse(dir, q) {
			return false
		}
	}
	return true
}

// worse says whether a ratio tree/base is more than tolerance worse: above 1.05 for a cost,
// below 0.95 for a throughput.
func worse(dir direction, ratio float64) bool {
	if dir == higherIsBetter {
		return ratio < 1-tolerance
	}
	return ratio > 1+tolerance
}

// header describes the comparison above the table.
type header struct {
	base, tree string // what was built: a revision, the working tree
	rounds     int
	benchtime  string // "" when reins bench ran with its default
	testBins   bool   // the 64 loops also ran through the test binaries
}

const verdictDrift = "**more than 5% worse in every round: needs a cause written down or a fix**"

// printTable writes the rows as a Markdown table, one line per figure, each cell listing the
// rounds in order, with a legend below.
func printTable(w io.Writer, h header, rows []row) error {
	rl := roundList(h.rounds)
	var b strings.Builder
	fmt.Fprintf(&b, "A/B of reins bench --only %s --json", strings.Join(benchmarks, ","))
	if h.benchtime != "" {
		fmt.Fprintf(&b, " --benchtime %s", h.benchtime)
	}
	fmt.Fprintf(&b, "; base %s, tree %s; %d round(s), base first in odd rounds, tree first in even ones", h.base, h.tree, h.rounds)
	if h.testBins {
		fmt.Fprintf(&b, "; in each round too, each side's test binary (go test -c of its bench package) %s, after the reins bench runs in rounds 1 and 2 of every four, before them in rounds 3 and 4", strings.Join(testArgs, " "))
	}
	b.WriteString(".\n\n")
	fmt.Fprintf(&b, "| figure | base, rounds %s | tree, rounds %s | tree/base, rounds %s | tree/base, median | verdict |\n", rl, rl, rl)
	b.WriteString("|---|---|---|---|---|---|\n")
	flagged := 0
	for _, r := range rows {
		if r.flagged {
			flagged++
		}
		med := "—"
		if slices.Contains(r.have, true) {
			med = fixed(3)(r.median)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.fig.label, cells(r.base, r.baseOK, r.fig.format),
			cells(r.tree, r.treeOK, r.fig.format), cells(r.ratios, r.have, fixed(3)), med, verdict(r))
	}
	fmt.Fprintf(&b, "\nFlagged: %d (more than 5%% worse than the base in every round: tree/base above 1.05, or below 0.95 for iterations/s); each needs a cause written down or a fix.\n", flagged)
	if h.rounds < 2 {
		b.WriteString("One round is no verdict: the rule asks for at least two, in alternation (--rounds).\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func verdict(r row) string {
	switch {
	case r.fig.dir == informative:
		return "(the machine's, not judged)"
	case r.flagged:
		return verdictDrift
	}
	for _, ok := range r.have {
		if !ok {
			return "not measured in every round"
		}
	}
	return "ok"
}

func roundList(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = strconv.Itoa(i + 1)
	}
	return strings.Join(parts, " / ")
}

func cells(vs []float64, have []bool, format func(float64) string) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = "—"
		if have[i] {
			parts[i] = format(v)
		}
	}
	return strings.Join(parts, " / ")
}

func fixed(prec int) func(float64) string {
	return func(v float64) string { return strconv.FormatFloat(v, 'f', prec, 64) }
}

func times(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) + "×" }

// thousands prints a whole number with commas, as BENCHMARKS.md writes them.
func thousands(v float64) string {
	s := strconv.FormatFloat(v, 'f', 0, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
