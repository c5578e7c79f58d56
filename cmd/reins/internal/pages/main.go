//go:build linux

// Command pages says which pages of its own executable a running process holds in memory:
// the file-backed part of its resident set (RssFile in /proc/PID/status), which the kernel
// counts in every figure of resident memory. It prints how much of each section of the binary
// is resident, and how much of the code by the module it belongs to (BENCHMARKS.md, "Memory
// of waiting runs": most of it is mapped by the initialisation of dependencies before main).
//
//	reins serve --data /tmp/d &
//	go run ./cmd/reins/internal/pages $!
//
// It runs on Linux only: it reads /proc/PID/maps, /proc/PID/pagemap (whose present bit any
// user may read of a process of their own) and the executable's ELF sections, its table of
// functions (.gopclntab, which a stripped build keeps) and its build information. It owns that
// reading and its report; it imports no reins package.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
)

// The exit statuses: a usage error is told apart from a process or file that cannot be read.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pages", flag.ContinueOnError)
	fs.SetOutput(stderr)
	binary := fs.String("binary", "", "the `file` to read sections and functions from: the process's executable by default (another build of the same source and flags has the same layout)")
	top := fs.Int("top", 20, "how many modules to list, the most resident first")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./cmd/reins/internal/pages [flags] PID\n\n")
		fmt.Fprintf(stderr, "Prints which pages of its executable process PID holds resident, by section and by module.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "pages: give one process id")
		fs.Usage()
		return exitUsage
	}
	pid, err := strconv.Atoi(fs.Arg(0))
	if err != nil || pid <= 0 {
		fmt.Fprintf(stderr, "pages: %q is not a process id\n", fs.Arg(0))
		return exitUsage
	}
	r, err := read(pid, *binary)
	if err != nil {
		fmt.Fprintf(stderr, "pages: %v\n", err)
		return exitFailed
	}
	r.print(stdout, *top)
	return exitOK
}
