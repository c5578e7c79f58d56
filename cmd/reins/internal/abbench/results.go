package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// result is one benchmark of `reins bench --json`: the members abbench reads of
// cmd/reins/internal/bench's Result (the other members are ignored, so that a base older or newer than
// the tree can still be read).
type result struct {
	Name        string             `json:"name"`
	NsPerOp     float64            `json:"ns_per_op"`
	AllocsPerOp int64              `json:"allocs_per_op"`
	Extra       map[string]float64 `json:"extra"`
}

// results is one run of `reins bench --json`, by benchmark name.
type results map[string]result

// parseResults reads what `reins bench --json` prints: one JSON array of results, each with a
// name of its own.
func parseResults(data []byte) (results, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var list []result
	if err := dec.Decode(&list); err != nil {
		return nil, fmt.Errorf("not a JSON array of results: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("more than one JSON value (something follows the array at byte %d)", dec.InputOffset())
	}
	if list == nil {
		return nil, errors.New("null where a JSON array of results should be")
	}
	out := make(results, len(list))
	for i, r := range list {
		switch {
		case strings.TrimSpace(r.Name) == "":
			return nil, fmt.Errorf("result %d has no name", i+1)
		case out[r.Name].Name != "":
			return nil, fmt.Errorf("result %d repeats the benchmark %q", i+1, r.Name)
		case r.NsPerOp < 0 || r.AllocsPerOp < 0:
			return nil, fmt.Errorf("result %q has a negative ns_per_op or allocs_per_op", r.Name)
		}
		for k, v := range r.Extra {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("result %q has extra %q = %v, not a figure", r.Name, k, v)
			}
		}
		out[r.Name] = r
	}
	return out, nil
}

// require says which of the named benchmarks a run lacks, in one sentence, or nil.
func (rs results) require(names []string) error {
	var missing []string
	for _, n := range names {
		if _, ok := rs[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no result for %s", strings.Join(missing, ", "))
	}
	return nil
}
