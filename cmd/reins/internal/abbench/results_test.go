package main

import (
	"os"
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
