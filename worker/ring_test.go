package worker

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// TestRingKeepsTheLast holds ring to a model, a slice of the keys in the order they first came,
// through random puts of new and known keys: the ring holds the last max keys, each with its
// latest value, and a key put again keeps its place.
func TestRingKeepsTheLast(t *testing.T) {
	for _, max := range []int{1, 2, 3, 16} {
		r := newRing[int](max)
		var model []string // oldest first
		values := map[string]int{}
		rnd := rand.New(rand.NewPCG(uint64(max), 1))
		for i := range 2000 {
			key := strconv.Itoa(rnd.IntN(3 * max))
			r.put(key, i)
			if !slices.Contains(model, key) {
				model = append(model, key)
				if len(model) > max {
					delete(values, model[0])
					model = model[1:]
				}
			}
			values[key] = i
			if len(r.m) != len(model) {
				t.Fatalf("max %d, put %d: the ring holds %d keys, want %d", max, i, len(r.m), len(model))
			}
			for _, k := range model {
				if v, ok := r.m[k]; !ok || v != values[k] {
					t.Fatalf("max %d, put %d: key %s is %d, %t; want %d", max, i, k, v, ok, values[k])
				}
			}
		}
	}
}

// BenchmarkAnsweredSetAdd adds a new task's id to a full set, as every answer does.
func BenchmarkAnsweredSetAdd(b *testing.B) {
	a := newAnsweredSet(maxEndedRuns)
	ids := make([]string, 2*maxEndedRuns)
	for i := range ids {
		ids[i] = "r-" + strconv.Itoa(i) + "-0123456789abcdef/agent/1/" + strconv.Itoa(i%50) + "/1"
	}
	for _, id := range ids[:maxEndedRuns] {
		a.add(id)
	}
	b.ResetTimer()
	for i := range b.N {
		a.add(ids[i%len(ids)])
	}
}
