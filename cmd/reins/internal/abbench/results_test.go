package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
)

// What reins bench --json prints today (cmd/reins/internal/bench's Result, indented as reins bench prints
// it: cmd/reins/internal/bench's TestResultJSON writes and checks testdata/results.json) is read, member
// for member.
func TestParseResultsOfReinsBench(t *testing.T) {
	printed, err := os.ReadFile("testdata/results.json")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := parseResults(printed)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.require(benchmarks); err != nil {
		t.Fatal(err)
	}
	if got := rs[benchFloor]; got.NsPerOp != 105115 || got.AllocsPerOp != 165 {
		t.Errorf("floor read as %+v", got)
	}
	if got := rs[benchOne].Extra["p99/floor"]; got != 7.7 {
		t.Errorf("p99/floor read as %v, want 7.7", got)
	}
	if got := rs[bench64].Extra["iterations/s"]; got != 12980 {
		t.Errorf("iterations/s read as %v, want 12980", got)
	}
}

func TestParseResultsRefuses(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"empty", ``, "not a JSON array of results"},
		{"progress text", `measuring jetstream_floor...`, "not a JSON array of results"},
		{"an object", `{"name":"x"}`, "not a JSON array of results"},
		{"null", `null`, "null where a JSON array"},
		{"two values", `[] []`, "more than one JSON value"},
		{"no name", `[{"name":"a"},{"ns_per_op":3}]`, "result 2 has no name"},
		{"repeated", `[{"name":"a"},{"name":"a"}]`, `result 2 repeats the benchmark "a"`},
		{"negative ns", `[{"name":"a","ns_per_op":-1}]`, `result "a" has a negative ns_per_op`},
		{"negative extra", `[{"name":"a","extra":{"p50/floor":-2}}]`, `result "a" has extra "p50/floor" = -2`},
		{"a string for a number", `[{"name":"a","ns_per_op":"fast"}]`, "not a JSON array of results"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseResults([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseResults(%q) = %v, want an error with %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestRequire(t *testing.T) {
	rs := results{benchFloor: {Name: benchFloor}}
	err := rs.require(benchmarks)
	if err == nil || err.Error() != "no result for agent_loop_iteration, agent_loop_64" {
		t.Errorf("require = %v", err)
	}
}

// Whatever it is given, parseResults returns results keyed by their own non-empty names with
// figures that are numbers, or an error; it never panics.
func FuzzParseResults(f *testing.F) {
	f.Add([]byte(`[{"name":"jetstream_floor","ns_per_op":1e5,"allocs_per_op":165,"extra":{"p50/floor":1.5}}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"name":"a"},{"name":"a"}]`))
	f.Add([]byte(`[{"name":" "}] x`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := parseResults(data)
		if err != nil {
			if rs != nil {
				t.Errorf("results %v beside the error %v", rs, err)
			}
			return
		}
		for name, r := range rs {
			if name != r.Name || strings.TrimSpace(name) == "" || r.NsPerOp < 0 || r.AllocsPerOp < 0 {
				t.Errorf("accepted %q as %+v", name, r)
			}
			for k, v := range r.Extra {
				if v < 0 || v != v {
					t.Errorf("accepted extra %q = %v", k, v)
				}
			}
		}
	})
}

// TestParseBenchLine reads the line go test -bench prints for a benchmark: ns/op and
// allocs/op as such, every other unit as an extra figure; and refuses, in one sentence, a
// line that is not one.
func TestParseBenchLine(t *testing.T) {
	out := []byte("goos: linux\ngoarch: amd64\n" +
		"BenchmarkAgentLoopThroughput64-2   \t   40000\t     78072 ns/op\t    144844 cpu-ns/iteration\t     12809 iterations/s\t     78072 ns/iteration\t   16183 B/op\t     142 allocs/op\n" +
		"PASS\n")
	r, err := parseBenchLine(out, testBenchmark)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != benchTest64 || r.NsPerOp != 78072 || r.AllocsPerOp != 142 || r.Extra["iterations/s"] != 12809 ||
		r.Extra["cpu-ns/iteration"] != 144844 || r.Extra["B/op"] != 16183 || len(r.Extra) != 4 {
		t.Errorf("read %+v", r)
	}
	for _, tc := range []struct{ out, want string }{
		{"PASS\n", "no line of BenchmarkAgentLoopThroughput64"},
		{"BenchmarkAgentLoopThroughput64000-2 1 1 ns/op\n", "no line of BenchmarkAgentLoopThroughput64"},
		{"BenchmarkAgentLoopThroughput64-2 40000 1 ns/op 2\n", "has 5 fields"},
		{"BenchmarkAgentLoopThroughput64-2 0 1 ns/op\n", `counts "0" iterations`},
		{"BenchmarkAgentLoopThroughput64-2 40000 -1 ns/op\n", `has "-1" ns/op, not a figure`},
		{"BenchmarkAgentLoopThroughput64-2 40000 NaN iterations/s\n", `has "NaN" iterations/s, not a figure`},
		{"BenchmarkAgentLoopThroughput64-2 40000 1.5 allocs/op\n", `has "1.5" allocs/op, not a whole number`},
	} {
		if _, err := parseBenchLine([]byte(tc.out), testBenchmark); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.out, err, tc.want)
		}
	}
}

// FuzzParseBenchLine: whatever go test printed, parseBenchLine returns an error or figures
// that are neither negative nor NaN, and a line made of figures reads back as them.
func FuzzParseBenchLine(f *testing.F) {
	f.Add([]byte("BenchmarkAgentLoopThroughput64-2 40000 78072 ns/op 12809 iterations/s 142 allocs/op\n"), 78072.0, uint32(142))
	f.Add([]byte("PASS"), 0.0, uint32(0))
	f.Fuzz(func(t *testing.T, out []byte, ns float64, allocs uint32) {
		if r, err := parseBenchLine(out, testBenchmark); err == nil {
			if r.NsPerOp < 0 || r.AllocsPerOp < 0 {
				t.Fatalf("read %+v from %q", r, out)
			}
			for k, v := range r.Extra {
				if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("extra %q = %v from %q", k, v, out)
				}
			}
		}
		if ns < 0 || math.IsNaN(ns) || math.IsInf(ns, 0) {
			return
		}
		line := fmt.Sprintf("%s-2 40000 %s ns/op %d allocs/op\n", testBenchmark, strconv.FormatFloat(ns, 'g', -1, 64), allocs)
		r, err := parseBenchLine([]byte(line), testBenchmark)
		if err != nil || r.NsPerOp != ns || r.AllocsPerOp != int64(allocs) {
			t.Fatalf("%q read as %+v, %v", line, r, err)
		}
	})
}
