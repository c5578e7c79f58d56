package intern

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"unsafe"
)

// The same bytes give the same string (one allocation for all of them), and the table never
// holds more than kept.
func TestBytes(t *testing.T) {
	a := Bytes([]byte("r-123/loop"))
	b := Bytes([]byte("r-123/loop"))
	if a != "r-123/loop" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Errorf("Bytes twice = %q and %q at two addresses, want one string", a, b)
	}
	if n := testing.AllocsPerRun(100, func() { _ = Bytes([]byte("r-123/loop")) }); n != 0 {
		t.Errorf("Bytes of bytes it holds allocates %v times, want 0", n)
	}
	for i := range 3 * kept {
		if s := Bytes(fmt.Appendf(nil, "run-%d", i)); s != fmt.Sprintf("run-%d", i) {
			t.Fatalf("Bytes(run-%d) = %q", i, s)
		}
	}
	if n := len(table.m); n > kept {
		t.Errorf("the table holds %d strings, want at most %d", n, kept)
	}
}

func BenchmarkBytes(b *testing.B) {
	v := []byte("2074342c623fe3c44b884836fa681da0f5509d2a2b60038d0e3556a91ca48988")
	b.ReportAllocs()
	for b.Loop() {
		_ = Bytes(v)
	}
}

// Goroutines at once, each giving values that others give too and more than the table keeps,
// always get the string of their bytes, from the front places or the table.
func TestBytesAtOnce(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 2 * kept {
				want := fmt.Sprintf("r-%d/%d", (i*7+g)%(kept+kept/2), i%3)
				if got := Bytes([]byte(want)); got != want {
					errs <- fmt.Sprintf("Bytes(%q) = %q", want, got)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// Run ids spread over the front places: the hash reads their random end. A hash of four bytes
// into 16 places, the wire decoders' before, held 16 of them at most.
func TestHashSpreadsRunIDs(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567" // what client.NewRunID writes after "r-"
	places := map[uint64]bool{}
	for range 128 {
		id := []byte("r-")
		for range 20 {
			id = append(id, alphabet[rnd.IntN(len(alphabet))])
		}
		places[hash(id)>>(64-frontBits)] = true
	}
	if len(places) < 90 {
		t.Errorf("128 run ids take %d of the %d front places: want 90 or more", len(places), len(front))
	}
}

// BenchmarkBytesParallel gives the run ids of 64 runs in turn from every processor, as the
// engine and the worker do.
func BenchmarkBytesParallel(b *testing.B) {
	ids := make([][]byte, 64)
	for i := range ids {
		ids[i] = fmt.Appendf(nil, "reins.event.%02d.r-%020x", i%16, i*0x9e3779b9)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			_ = Bytes(ids[i%len(ids)])
			i++
		}
	})
}
