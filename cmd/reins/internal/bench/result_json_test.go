package bench_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/reins-run/reins/cmd/reins/internal/bench"
)

// printedResults is what `reins bench --json` prints for the hot path's three benchmarks
// (indented as it prints them). cmd/reins/internal/abbench reads this file in its own tests, so the two
// agree on the format without abbench's tests linking the benchmarks.
const printedResults = "../abbench/testdata/results.json"

// TestResultJSON: the JSON of [bench.Result] is the one cmd/reins/internal/abbench's tests read. A change
// of the format fails here; write the file again with REINS_UPDATE_GOLDEN=1 and abbench's
// TestParseResultsOfReinsBench says whether its reader still follows.
func TestResultJSON(t *testing.T) {
	printed, err := json.MarshalIndent([]bench.Result{
		{Name: "jetstream_floor", Description: "the floor", N: 9000, NsPerOp: 105115, AllocsPerOp: 165, BytesPerOp: 10007, RatioToFloor: 1},
		{Name: "agent_loop_iteration", N: 4000, NsPerOp: 235481, AllocsPerOp: 254, RatioToFloor: 2.24,
			Extra: map[string]float64{"p50-ns": 193000, "p50/floor": 1.84, "p99/floor": 7.7, "cpu-ns/iteration": 300000}},
		{Name: "agent_loop_64", N: 30000, NsPerOp: 76973, AllocsPerOp: 221, Extra: map[string]float64{"iterations/s": 12980, "cpu-ns/iteration": 144000}},
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	printed = append(printed, '\n')
	if os.Getenv("REINS_UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(printedResults, printed, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	saved, err := os.ReadFile(printedResults)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(saved, printed) {
		t.Errorf("%s differs from what bench.Result prints now:\n%s\nwrite it again with REINS_UPDATE_GOLDEN=1", printedResults, printed)
	}
}
