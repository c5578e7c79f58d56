//go:build linux

package main

import (
	"bufio"
	"cmp"
	"debug/buildinfo"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// pageSize is the unit of /proc/PID/pagemap.
var pageSize = uint64(os.Getpagesize())

// report is what a process holds resident of its executable.
type report struct {
	pid      int
	exe      string
	resident uint64 // bytes of the executable's mappings that are resident
	sections []sectionPages
	modules  []modulePages
}

type sectionPages struct {
	name           string
	resident, size uint64
}

type modulePages struct {
	module         string
	resident, size uint64
}

// read reads process pid's resident pages of its executable, with the sections and functions
// of binary ("": the executable itself).
func read(pid int, binary string) (*report, error) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	if binary == "" {
		binary = fmt.Sprintf("/proc/%d/exe", pid)
	}
	maps, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	defer maps.Close()
	ranges, err := mappingsOf(maps, exe)
	if err != nil {
		return nil, fmt.Errorf("/proc/%d/maps: %w", pid, err)
	}
	pagemap, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	defer pagemap.Close()
	present, err := presentPages(pagemap, ranges)
	if err != nil {
		return nil, fmt.Errorf("/proc/%d/pagemap: %w", pid, err)
	}
	file, err := os.Open(binary)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	f, err := elf.NewFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s is not an ELF executable: %w", binary, err)
	}
	funcs, err := funcsOf(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", binary, err)
	}
	var mods []string
	if bi, err := buildinfo.Read(file); err == nil {
		mods = append(mods, bi.Main.Path)
		for _, d := range bi.Deps {
			mods = append(mods, d.Path)
		}
	}
	r := &report{pid: pid, exe: exe, resident: uint64(len(present)) * pageSize}
	r.sections = bySection(f.Sections, present)
	r.modules = byModule(funcs, mods, present)
	return r, nil
}

// addrRange is a range of addresses [start, end).
type addrRange struct{ start, end uint64 }

// mappingsOf returns the ranges of /proc/PID/maps mapped from file exe.
func mappingsOf(maps io.Reader, exe string) ([]addrRange, error) {
	var rs []addrRange
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || strings.Join(fields[5:], " ") != exe {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil || end < start {
			return nil, fmt.Errorf("line %q: its address range is not START-END in hexadecimal", sc.Text())
		}
		rs = append(rs, addrRange{start, end})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("nothing is mapped from %s", exe)
	}
	return rs, nil
}

// presentPages returns the addresses of the pages of ranges that are resident: bit 63 of
// each page's entry of pagemap.
func presentPages(pagemap io.ReaderAt, ranges []addrRange) (map[uint64]bool, error) {
	present := map[uint64]bool{}
	for _, r := range ranges {
		n := (r.end - r.start) / pageSize
		buf := make([]byte, 8*n)
		if _, err := pagemap.ReadAt(buf, int64(r.start/pageSize*8)); err != nil {
			return nil, err
		}
		for i := range n {
			if binary.LittleEndian.Uint64(buf[8*i:])>>63 == 1 {
				present[r.start+i*pageSize] = true
			}
		}
	}
	return present, nil
}

// residentIn returns how many bytes of [start, start+size) lie on present pages.
func residentIn(start, size uint64, present map[uint64]bool) uint64 {
	var n uint64
	for a := start; a < start+size; {
		page := a - a%pageSize
		next := min(page+pageSize, start+size)
		if present[page] {
			n += next - a
		}
		a = next
	}
	return n
}

// bySection returns the resident bytes of each allocated section, the most resident first.
func bySection(secs []*elf.Section, present map[uint64]bool) []sectionPages {
	var out []sectionPages
	for _, s := range secs {
		if s.Flags&elf.SHF_ALLOC == 0 || s.Type == elf.SHT_NOBITS || s.Size == 0 {
			continue
		}
		out = append(out, sectionPages{s.Name, residentIn(s.Addr, s.Size, present), s.Size})
	}
	slices.SortStableFunc(out, func(a, b sectionPages) int { return cmp.Compare(b.resident, a.resident) })
	return out
}

// funcsOf returns the functions of Go executable f, read from its table of functions
// (.gopclntab), which a stripped executable keeps: the runtime needs it.
func funcsOf(f *elf.File) ([]gosym.Func, error) {
	pcln, text := f.Section(".gopclntab"), f.Section(".text")
	if pcln == nil || text == nil {
		return nil, errors.New("no .gopclntab or .text section: not a Go executable")
	}
	data, err := pcln.Data()
	if err != nil {
		return nil, fmt.Errorf("read .gopclntab: %w", err)
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return nil, fmt.Errorf("read .gopclntab: %w", err)
	}
	return tab.Funcs, nil
}

// byModule returns the resident bytes of the code of each module (modules: the module paths
// of the binary's build information), the most resident first.
func byModule(funcs []gosym.Func, modules []string, present map[uint64]bool) []modulePages {
	sums := map[string]*modulePages{}
	for _, fn := range funcs {
		if fn.End <= fn.Entry {
			continue
		}
		m := moduleOf(packageOf(fn.Name), modules)
		p := sums[m]
		if p == nil {
			p = &modulePages{module: m}
			sums[m] = p
		}
		p.resident += residentIn(fn.Entry, fn.End-fn.Entry, present)
		p.size += fn.End - fn.Entry
	}
	out := make([]modulePages, 0, len(sums))
	for _, p := range sums {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b modulePages) int {
		return cmp.Or(cmp.Compare(b.resident, a.resident), strings.Compare(a.module, b.module))
	})
	return out
}

// packageOf returns the import path of the package of Go symbol name: what comes before the
// first dot after the path's last slash, with the dots the linker escapes as %2e in the last
// element back. Type arguments ([...]) are not read: they name other packages. The symbols the
// compiler makes for types and the linker's own (type:, go:) have no package: "".
func packageOf(name string) string {
	if strings.HasPrefix(name, "type:") || strings.HasPrefix(name, "go:") {
		return ""
	}
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i]
	}
	slash := strings.LastIndexByte(name, '/') + 1
	dot := strings.IndexByte(name[slash:], '.')
	if dot < 0 {
		return ""
	}
	return strings.ReplaceAll(name[:slash+dot], "%2e", ".")
}

// Modules that are not one of the binary's dependencies.
const (
	stdModule       = "the standard library and the runtime"
	generatedModule = "made by the compiler or the linker"
)

// moduleOf returns the module of modules that holds package pkg: the longest module path
// that is pkg or a parent of it; stdModule for a package of the standard library (a path
// whose first element has no dot, main excepted) and generatedModule for "" (packageOf's).
func moduleOf(pkg string, modules []string) string {
	if pkg == "" {
		return generatedModule
	}
	best := ""
	for _, m := range modules {
		if (pkg == m || strings.HasPrefix(pkg, m+"/")) && len(m) > len(best) {
			best = m
		}
	}
	switch {
	case best != "":
		return best
	case pkg == "main":
		return "main"
	case !strings.Contains(strings.SplitN(pkg, "/", 2)[0], "."):
		return stdModule
	}
	return pkg // a package no module of the build information holds
}

// print writes the report, with the top modules.
func (r *report) print(w io.Writer, top int) {
	fmt.Fprintf(w, "process %d holds %s of %s resident\n\n", r.pid, mb(r.resident), r.exe)
	fmt.Fprintf(w, "| section | resident | size |\n|---|---|---|\n")
	for _, s := range r.sections {
		fmt.Fprintf(w, "| %s | %s | %s |\n", s.name, mb(s.resident), mb(s.size))
	}
	fmt.Fprintf(w, "\n| module | code resident | code |\n|---|---|---|\n")
	for i, m := range r.modules {
		if i == top {
			break
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", m.module, mb(m.resident), mb(m.size))
	}
}

func mb(n uint64) string { return strconv.FormatFloat(float64(n)/1e6, 'f', 2, 64) + " MB" }
