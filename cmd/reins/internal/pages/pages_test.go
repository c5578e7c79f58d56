//go:build linux

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

func TestPackageOf(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"runtime.mallocgc", "runtime"},
		{"internal/runtime/maps.(*Map).getWithoutKeySmallFastStr", "internal/runtime/maps"},
		{"github.com/openai/openai-go/v3/packages/param.(*APIObject).IsPresent", "github.com/openai/openai-go/v3/packages/param"},
		{"github.com/nats-io/nats%2ego.(*Conn).parse", "github.com/nats-io/nats.go"},
		{"gopkg.in/yaml%2ev3.(*parser).parse", "gopkg.in/yaml.v3"},
		{"slices.SortFunc[go.shape.struct { github.com/a/b.X int }]", "slices"},
		{"github.com/reins-run/reins/worker.(*ring[go.shape.struct {}]).put", "github.com/reins-run/reins/worker"},
		{"github.com/a/b.F[github.com/c/d.T].func1", "github.com/a/b"},
		{"main.main", "main"},
		{"type:.eq.github.com/a/b.T", ""},
		{"go:buildid", ""},
		{"nodot", ""},
	} {
		if got := packageOf(c.name); got != c.want {
			t.Errorf("packageOf(%q) = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestModuleOf(t *testing.T) {
	mods := []string{"github.com/reins-run/reins", "github.com/openai/openai-go/v3", "github.com/nats-io/nats.go", "github.com/nats-io/nats-server/v2", "golang.org/x/sys"}
	for _, c := range []struct{ pkg, want string }{
		{"github.com/reins-run/reins/worker", "github.com/reins-run/reins"},
		{"github.com/reins-run/reins", "github.com/reins-run/reins"},
		{"github.com/openai/openai-go/v3/packages/param", "github.com/openai/openai-go/v3"},
		{"github.com/nats-io/nats.go/jetstream", "github.com/nats-io/nats.go"},
		{"github.com/nats-io/nats-server/v2/server", "github.com/nats-io/nats-server/v2"},
		{"github.com/nats-io/nats-serverx", "github.com/nats-io/nats-serverx"}, // a prefix is not a parent
		{"golang.org/x/sys/unix", "golang.org/x/sys"},
		{"vendor/golang.org/x/net/http2/hpack", stdModule},
		{"runtime", stdModule},
		{"internal/runtime/maps", stdModule},
		{"main", "main"},
		{"", generatedModule},
	} {
		if got := moduleOf(c.pkg, mods); got != c.want {
			t.Errorf("moduleOf(%q) = %q, want %q", c.pkg, got, c.want)
		}
	}
}

// FuzzPackageOf: a symbol's package is "" or what comes before a dot of its name, its %2e
// read as dots, and never a type argument's.
func FuzzPackageOf(f *testing.F) {
	for _, s := range []string{"runtime.mallocgc", "github.com/nats-io/nats%2ego.(*Conn).parse", "a/b.F[c/d.T]", "type:.eq.x", "", "/", "a/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		p := packageOf(name)
		if p == "" {
			return
		}
		head, _, _ := strings.Cut(name, "[")
		if !strings.HasPrefix(strings.ReplaceAll(head, "%2e", "."), p+".") {
			t.Errorf("packageOf(%q) = %q, which is not what comes before a dot of %q", name, p, head)
		}
	})
}

func TestMappingsOf(t *testing.T) {
	maps := `00400000-01c50000 r-xp 00000000 fd:01 123 /opt/my reins
01c50000-03a78000 r--p 01850000 fd:01 123 /opt/my reins
03a78000-03b19000 rw-p 03678000 fd:01 123 /opt/my reins
03b19000-03b50000 rw-p 00000000 00:00 0
7f0000000000-7f0000001000 r--p 00000000 fd:01 9 /usr/lib/libc.so
`
	got, err := mappingsOf(strings.NewReader(maps), "/opt/my reins")
	if err != nil {
		t.Fatal(err)
	}
	want := []addrRange{{0x400000, 0x1c50000}, {0x1c50000, 0x3a78000}, {0x3a78000, 0x3b19000}}
	if len(got) != len(want) {
		t.Fatalf("mappingsOf = %x, want %x", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mapping %d = %x, want %x", i, got[i], want[i])
		}
	}
	for _, c := range []struct{ maps, want string }{
		{"zz-01 r-xp 0 fd:01 1 /x\n", `line "zz-01 r-xp 0 fd:01 1 /x": its address range is not START-END in hexadecimal`},
		{"0200-0100 r-xp 0 fd:01 1 /x\n", "its address range is not START-END"},
		{"0100-0200 r-xp 0 fd:01 1 /y\n", "nothing is mapped from /x"},
	} {
		if _, err := mappingsOf(strings.NewReader(c.maps), "/x"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("mappingsOf(%q) = %v, want an error with %q", c.maps, err, c.want)
		}
	}
}

func TestResidentIn(t *testing.T) {
	ps := pageSize
	present := map[uint64]bool{ps: true, 3 * ps: true}
	for _, c := range []struct{ start, size, want uint64 }{
		{0, ps, 0},
		{ps, ps, ps},
		{ps / 2, ps, ps / 2},         // half on a page that is not resident, half on one that is
		{ps + 10, 20, 20},            // within a resident page
		{0, 4 * ps, 2 * ps},          // two of four pages
		{2*ps - 1, 2*ps + 2, ps + 1}, // the last byte of page 1, pages 2 and 3, the first byte of page 4
		{3*ps + ps - 1, 1, 1},        // the last byte of page 3
		{4 * ps, 10 * ps, 0},         // past them
		{ps, 0, 0},                   // nothing
		{3 * ps, ps + ps/4, ps},      // page 3, and a quarter of page 4
		{ps + ps/2, 2 * ps, ps},      // half of page 1, page 2, half of page 3
	} {
		if got := residentIn(c.start, c.size, present); got != c.want {
			t.Errorf("residentIn(%d, %d) = %d, want %d", c.start, c.size, got, c.want)
		}
	}
}

// TestReadItself reads the test's own process: its executable's code is partly resident, the
// code running now (the standard library's, this module's) among it, and no section is more
// resident than it is large.
func TestReadItself(t *testing.T) {
	r, err := read(os.Getpid(), "")
	if err != nil {
		t.Fatal(err)
	}
	if r.resident == 0 {
		t.Fatal("no page of the test's executable is resident")
	}
	var text *sectionPages
	var sum uint64
	for i, s := range r.sections {
		if s.resident > s.size {
			t.Errorf("section %s: %d bytes resident of %d", s.name, s.resident, s.size)
		}
		if s.name == ".text" {
			text = &r.sections[i]
		}
		sum += s.resident
	}
	if text == nil || text.resident == 0 {
		t.Fatalf("sections %+v: no resident .text", r.sections)
	}
	if sum > r.resident {
		t.Errorf("the sections hold %d bytes resident, more than the %d of the mappings", sum, r.resident)
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("the test binary has no build information")
	}
	resident := map[string]uint64{}
	var code uint64
	for _, m := range r.modules {
		resident[m.module] = m.resident
		code += m.resident
		if m.resident > m.size {
			t.Errorf("module %s: %d bytes of code resident of %d", m.module, m.resident, m.size)
		}
	}
	for _, m := range []string{stdModule, bi.Main.Path} {
		if resident[m] == 0 {
			t.Errorf("modules %+v: none of the code of %s, which is running, is resident", r.modules, m)
		}
	}
	if code > text.resident {
		t.Errorf("the modules' code is %d bytes resident, more than .text's %d", code, text.resident)
	}
}

func TestRun(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	notELF := filepath.Join(t.TempDir(), "not-elf")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args       []string
		code       int
		out, inErr string
	}{
		{[]string{self}, exitOK, "| .text |", ""},
		{[]string{"--top", "1", self}, exitOK, "| the standard library and the runtime |", ""},
		{nil, exitUsage, "", "pages: give one process id"},
		{[]string{"x"}, exitUsage, "", `pages: "x" is not a process id`},
		{[]string{"--binary", notELF, self}, exitFailed, "", "pages: " + notELF},
		{[]string{"-h"}, exitOK, "", "usage: go run ./cmd/reins/internal/pages"},
	} {
		var out, errOut bytes.Buffer
		code := run(c.args, &out, &errOut)
		if code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errOut.String(), c.inErr) {
			t.Errorf("pages %q: exit %d, out %q, err %q; want exit %d, out with %q, err with %q", c.args, code, out.String(), errOut.String(), c.code, c.out, c.inErr)
		}
	}
}
