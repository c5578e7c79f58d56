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
			if len(r.index) != len(model) {
				t.Fatalf("max %d, put %d: the ring holds %d keys, want %d", max, i, len(r.index), len(model))
			}
			for _, k := range model {
				if v, ok := r.get(k); !ok || v != values[k] {
					t.Fatalf("max %d, put %d: key %s is %d, %t; want %d", max, i, k, v, ok, values[k])
				}
			}
		}
	}
}

// TestRingKeysOfOneHash makes keys share hashes (a mask of none, one or two bits) and holds
// the ring to what it promises then: get gives a key its latest value or nothing, never a key
// whose entry is older than the last max the ring made, and always the key just put.
func TestRingKeysOfOneHash(t *testing.T) {
	for _, mask := range []uint64{0, 1, 3} {
		for _, max := range []int{1, 2, 5} {
			r := newRing[string](max)
			r.mask = mask
			var entries []string // the keys of the last max entries made, oldest first
			values := map[string]string{}
			rnd := rand.New(rand.NewPCG(mask, uint64(max)))
			for i := range 2000 {
				key := strconv.Itoa(rnd.IntN(3 * max))
				value := key + "@" + strconv.Itoa(i)
				if _, found := r.get(key); !found { // the put makes an entry
					entries = append(entries, key)
					if len(entries) > max {
						entries = entries[1:]
					}
				}
				r.put(key, value)
				values[key] = value
				if v, ok := r.get(key); !ok || v != value {
					t.Fatalf("mask %d, max %d, put %d: the key just put, %s, is %q, %t", mask, max, i, key, v, ok)
				}
				for k := range 3 * max {
					key := strconv.Itoa(k)
					if v, ok := r.get(key); ok && (v != values[key] || !slices.Contains(entries, key)) {
						t.Fatalf("mask %d, max %d, put %d: key %s reads as %q (last put %q); the last entries are %v", mask, max, i, key, v, values[key], entries)
					}
				}
				if len(r.index) > max {
					t.Fatalf("mask %d, max %d, put %d: the ring finds %d keys", mask, max, i, len(r.index))
				}
			}
		}
	}
}

// TestRingHashTakenBack puts two keys of one hash in turn, each taking the hash's place from
// the other, then a key of another hash: evicting the entry a hash's place no longer points to
// leaves that place to the key that took it.
func TestRingHashTakenBack(t *testing.T) {
	r := newRing[int](2)
	r.mask = 1
	var of [2][]string // keys by their hash, 0 or 1
	for i := 0; len(of[0]) < 2 || len(of[1]) < 1; i++ {
		k := "k" + strconv.Itoa(i)
		of[r.hash(k)] = append(of[r.hash(k)], k)
	}
	a, b, c := of[0][0], of[0][1], of[1][0]
	r.put(a, 1)
	r.put(b, 2) // takes the hash from a
	if _, ok := r.get(a); ok {
		t.Fatalf("%s still reads after %s took its hash", a, b)
	}
	r.put(a, 3) // takes it back, in a new entry that evicts a's first
	if v, ok := r.get(a); !ok || v != 3 {
		t.Fatalf("%s is %d, %t after it was put again; want 3, true", a, v, ok)
	}
	r.put(c, 4) // evicts b's entry, whose hash a holds now
	if v, ok := r.get(a); !ok || v != 3 {
		t.Fatalf("%s is %d, %t after %s's entry was evicted; want 3, true", a, v, ok, b)
	}
	if v, ok := r.get(c); !ok || v != 4 || len(r.index) != 2 {
		t.Fatalf("%s is %d, %t with %d keys found; want 4, true, 2", c, v, ok, len(r.index))
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
