package intern

import (
	"fmt"
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
