package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeReins writes a shell script standing for a reins binary: `bench --help` prints help
// (naming --benchtime when benchtime is set), and each `bench` run logs its side and
// arguments to log and prints its next canned output (its exit status, status).
func fakeReins(t *testing.T, dir, side, log string, benchtime bool, status int, outputs ...string) string {
	t.Helper()
	help := "      --json   print the results as JSON"
	if benchtime {
		help += "\n      --benchtime duration   run each benchmark at least this long"
	}
	for i, o := range outputs {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%d.json", side, i+1)), []byte(o), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := fmt.Sprintf(`#!/bin/sh
case "$*" in *--help*) printf '%%s\n' '%s'; exit 0;; esac
echo "%s $*" >> '%s'
n=$(cat '%s/%s.count' 2>/dev/null || echo 0); n=$((n+1)); echo $n > '%s/%s.count'
echo "measuring jetstream_floor..." >&2
cat '%s/%s-'$n'.json'
exit %d
`, help, side, log, dir, side, dir, side, dir, side, status)
	path := filepath.Join(dir, side+"-reins")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// benchJSON is what reins bench --json prints for the three benchmarks.
func benchJSON(p99, itersPerS float64) string {
	return fmt.Sprintf(`[
  {"name": "jetstream_floor", "description": "the floor", "n": 9000, "ns_per_op": 100000, "allocs_per_op": 165, "bytes_per_op": 10007, "ratio_to_floor": 1},
  {"name": "agent_loop_iteration", "n": 4000, "ns_per_op": 230000, "allocs_per_op": 244, "bytes_per_op": 22000, "ratio_to_floor": 2.3,
   "extra": {"p50-ns": 150000, "p50/floor": 1.5, "p99-ns": 700000, "p99/floor": %g, "cpu-ns/iteration": 300000}},
  {"name": "agent_loop_64", "n": 30000, "ns_per_op": 77000, "allocs_per_op": 221, "bytes_per_op": 21000, "ratio_to_floor": 0.77,
   "extra": {"iterations/s": %g, "ns/iteration": 77000, "cpu-ns/iteration": 140000}}
]
`, p99, itersPerS)
}

// Three rounds with two fake binaries: the runs alternate (base first in odd rounds), both
// get the same arguments, and the table flags the throughput that is 10% lower in every round
// but not the p99 that is worse in two rounds of three.
func TestPlumbingEndToEnd(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "runs.log")
	base := fakeReins(t, dir, "base", log, true, 0, benchJSON(7, 13000), benchJSON(7, 13000), benchJSON(7, 13000))
	tree := fakeReins(t, dir, "tree", log, true, 0, benchJSON(8, 11700), benchJSON(8, 11600), benchJSON(7, 11500))
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--base-bin", base, "--tree-bin", tree, "--rounds", "3", "--benchtime", "200ms"}, &out, &errb)
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
	}
	logged, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	args := "bench --only jetstream_floor,agent_loop_iteration,agent_loop_64 --json --benchtime 200ms"
	var want strings.Builder
	for _, side := range []string{"base", "tree", "tree", "base", "base", "tree"} {
		want.WriteString(side + " " + args + "\n")
	}
	if string(logged) != want.String() {
		t.Errorf("runs:\n%swant:\n%s", logged, want.String())
	}
	table := out.String()
	for _, line := range []string{
		"| 64 loops, iterations/s | 13,000 / 13,000 / 13,000 | 11,700 / 11,600 / 11,500 | 0.900 / 0.892 / 0.885 | 0.892 | " + verdictDrift + " |",
		"| one loop, p99 / floor | 7.00× / 7.00× / 7.00× | 8.00× / 8.00× / 7.00× | 1.143 / 1.143 / 1.000 | 1.143 | ok |",
		"Flagged: 1 ",
	} {
		if !strings.Contains(table, line) {
			t.Errorf("the table lacks %q:\n%s", line, table)
		}
	}
	if !strings.Contains(errb.String(), "measuring jetstream_floor...") || !strings.Contains(errb.String(), "round 2 of 3, tree") {
		t.Errorf("stderr lacks the runs' progress:\n%s", errb.String())
	}
}

// A run that fails, or prints what is not its results, ends abbench with one sentence naming
// the round and the binary; nothing is printed as a table.
func TestPlumbingFailures(t *testing.T) {
	good := benchJSON(7, 13000)
	for _, tc := range []struct {
		name       string
		treeStatus int
		treeOut    string
		benchtime  bool // the base's reins bench takes --benchtime
		args       []string
		want       string
	}{
		{"the tree's run fails", 1, good, true, nil, "round 1, tree"},
		{"the tree prints text", 0, "panic: oops", true, nil, "round 1, tree"},
		{"the tree prints text, why", 0, "panic: oops", true, nil, "what reins bench --json printed: not a JSON array of results"},
		{"the tree lacks a benchmark", 0, `[{"name":"jetstream_floor","ns_per_op":1}]`, true, nil, "no result for agent_loop_iteration, agent_loop_64"},
		{"the base predates --benchtime", 0, good, false, []string{"--benchtime", "200ms"}, "--benchtime 200ms: the base's reins bench"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "runs.log")
			base := fakeReins(t, dir, "base", log, tc.benchtime, 0, good, good)
			tree := fakeReins(t, dir, "tree", log, true, tc.treeStatus, tc.treeOut, tc.treeOut)
			var out, errb bytes.Buffer
			args := append([]string{"--base-bin", base, "--tree-bin", tree}, tc.args...)
			if code := run(context.Background(), args, &out, &errb); code != exitFailed {
				t.Errorf("exit %d, want %d", code, exitFailed)
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, errb.String())
			}
			if out.Len() > 0 {
				t.Errorf("a table printed after a failure:\n%s", out.String())
			}
		})
	}
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rounds", "0"}, "--rounds 0: want at least 1"},
		{[]string{"--benchtime", "-1s"}, "--benchtime -1s: want more than 0"},
		{[]string{"HEAD"}, `unexpected argument "HEAD"`},
		{[]string{"--base", ""}, "--base is empty"},
		{[]string{"--nope"}, "flag provided but not defined: -nope"},
		{[]string{"--tree-test-bin", "x"}, "--base-test-bin and --tree-test-bin go with --test-binaries"},
		{[]string{"--test-binaries", "--base", "", "--base-bin", "x"}, "--test-binaries builds the base's test binary from it"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), tc.args, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("run %q: exit %d, stderr %q; want %d and %q", tc.args, code, errb.String(), exitUsage, tc.want)
		}
	}
}

// fakeTest writes a shell script standing for a benchmarks' test binary: each run logs its side
// and arguments to log and prints a benchmark line with the next of itersPerS (its exit
// status, status).
func fakeTest(t *testing.T, dir, side, log string, status int, itersPerS ...float64) string {
	t.Helper()
	var lines strings.Builder
	for i, v := range itersPerS {
		fmt.Fprintf(&lines, "%d) echo 'BenchmarkAgentLoopThroughput64-2   40000   77000 ns/op   %g cpu-ns/iteration   %g iterations/s   77000 ns/iteration   17000 B/op   %d allocs/op';;\n",
			i+1, 1.4e9/v, v, 140+i)
	}
	script := fmt.Sprintf(`#!/bin/sh
echo "%s-test $*" >> '%s'
n=$(cat '%s/%s-test.count' 2>/dev/null || echo 0); n=$((n+1)); echo $n > '%s/%s-test.count'
echo 'goos: linux'
case $n in
%sesac
echo PASS
exit %d
`, side, log, dir, side, dir, side, lines.String(), status)
	path := filepath.Join(dir, side+".test")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// With --test-binaries each round also runs both sides' test binaries, in the round's order,
// with the same arguments: after the reins bench runs in rounds 1 and 2 of every four, before
// them in rounds 3 and 4. Their three rows join the table, whichever ran first in the round,
// and are judged like the others (the tree's 64 loops 10% slower in every round: flagged).
func TestPlumbingTestBinaries(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "runs.log")
	good := benchJSON(7, 13000)
	base := fakeReins(t, dir, "base", log, true, 0, good, good, good, good)
	tree := fakeReins(t, dir, "tree", log, true, 0, good, good, good, good)
	baseTest := fakeTest(t, dir, "base", log, 0, 14000, 13000, 14000, 13000)
	treeTest := fakeTest(t, dir, "tree", log, 0, 12600, 11700, 12600, 11700)
	var out, errb bytes.Buffer
	args := []string{"--base-bin", base, "--tree-bin", tree, "--rounds", "4", "--test-binaries", "--base-test-bin", baseTest, "--tree-test-bin", treeTest}
	if code := run(context.Background(), args, &out, &errb); code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
	}
	logged, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	bench := "bench --only jetstream_floor,agent_loop_iteration,agent_loop_64 --json"
	testRun := strings.Join(testArgs, " ")
	want := strings.Join([]string{
		"base " + bench, "tree " + bench, "base-test " + testRun, "tree-test " + testRun,
		"tree " + bench, "base " + bench, "tree-test " + testRun, "base-test " + testRun,
		"base-test " + testRun, "tree-test " + testRun, "base " + bench, "tree " + bench,
		"tree-test " + testRun, "base-test " + testRun, "tree " + bench, "base " + bench,
	}, "\n") + "\n"
	if string(logged) != want {
		t.Errorf("runs:\n%swant:\n%s", logged, want)
	}
	table := out.String()
	for _, line := range []string{
		"| 64 loops, test binaries, iterations/s | 14,000 / 13,000 / 14,000 / 13,000 | 12,600 / 11,700 / 12,600 / 11,700 | 0.900 / 0.900 / 0.900 / 0.900 | 0.900 | " + verdictDrift + " |",
		"| 64 loops, test binaries, CPU µs/iteration | 100 / 108 / 100 / 108 | 111 / 120 / 111 / 120 | 1.111 / 1.111 / 1.111 / 1.111 | 1.111 | " + verdictDrift + " |",
		"| 64 loops, test binaries, allocs/iteration | 140 / 141 / 142 / 143 | 140 / 141 / 142 / 143 | 1.000 / 1.000 / 1.000 / 1.000 | 1.000 | ok |",
		"| 64 loops, iterations/s | 13,000 / 13,000 / 13,000 / 13,000 | 13,000 / 13,000 / 13,000 / 13,000 | 1.000 / 1.000 / 1.000 / 1.000 | 1.000 | ok |",
		"each side's test binary (go test -c of its bench package) " + testRun,
		"Flagged: 2 ",
	} {
		if !strings.Contains(table, line) {
			t.Errorf("the table lacks %q:\n%s", line, table)
		}
	}

	// A test binary that fails ends abbench with one sentence naming the round and the side.
	dir = t.TempDir()
	log = filepath.Join(dir, "runs.log")
	args = []string{"--base-bin", fakeReins(t, dir, "base", log, true, 0, good), "--tree-bin", fakeReins(t, dir, "tree", log, true, 0, good),
		"--test-binaries", "--base-test-bin", fakeTest(t, dir, "base", log, 0, 14000), "--tree-test-bin", fakeTest(t, dir, "tree", log, 1, 12000)}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), args, &out, &errb); code != exitFailed || !strings.Contains(errb.String(), "round 1, tree's test binary") || out.Len() > 0 {
		t.Errorf("a failing test binary: exit %d, stderr %q, table %q", code, errb.String(), out.String())
	}
}

// Without --test-binaries the table has no row of them.
func TestNoTestBinaryRows(t *testing.T) {
	rows := compare([]round{{base: results{bench64: {Name: bench64}}, tree: results{bench64: {Name: bench64}}}})
	for _, r := range rows {
		if r.fig.bench == benchTest64 {
			t.Errorf("a row of the test binaries without them: %s", r.fig.label)
		}
	}
}
