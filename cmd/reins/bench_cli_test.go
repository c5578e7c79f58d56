package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// reins bench --only NAME --json measures the floor and NAME, and prints them as JSON with each
// ratio to the floor.
func TestBenchCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"bench", "--only", "loop_iteration", "--benchtime", "50ms", "--json"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var results []struct {
		Name         string  `json:"name"`
		N            int     `json:"n"`
		NsPerOp      float64 `json:"ns_per_op"`
		RatioToFloor float64 `json:"ratio_to_floor"`
	}
	if err := json.Unmarshal(out.Bytes(), &results); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	if len(results) != 2 || results[0].Name != "jetstream_floor" || results[1].Name != "loop_iteration" {
		t.Fatalf("results %+v, want the floor then loop_iteration", results)
	}
	if results[0].RatioToFloor != 1 || results[1].N <= 0 || results[1].NsPerOp <= 0 ||
		results[1].RatioToFloor != results[1].NsPerOp/results[0].NsPerOp {
		t.Errorf("results %+v: the ratio must be ns/op over the floor's ns/op", results)
	}
	if !strings.Contains(errb.String(), "measuring loop_iteration") {
		t.Errorf("no progress on stderr: %q", errb.String())
	}
}

func TestBenchUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"bench", "--only", "nope"}, {"bench", "extra"}, {"bench", "--benchtime", "0s"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitUsage, errb.String())
		}
	}
}
