// Command abbench guards the hot path against slow drift. It builds a base revision (by
// default the fixed baseline of BENCHMARKS.md) and the working tree with the same flags, runs
// the hot-path benchmarks of `reins bench` with the two binaries alternately, round after
// round, and prints each figure per round with its ratio tree/base and the median of those
// ratios, flagging a figure that is more than 5% worse than the base in every round.
//
//	go run ./cmd/reins/internal/abbench                        # against the baseline, two rounds
//	go run ./cmd/reins/internal/abbench --base HEAD --rounds 4 # against the last commit, four
//
// It owns the A/B procedure and its verdict; what is measured is cmd/reins/internal/bench's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// baseline is the hot path's fixed baseline commit (BENCHMARKS.md, "Drift against the
// baseline"): the values-by-reference commit.
const baseline = "89af8b1"

const (
	exitOK     = 0
	exitFailed = 1 // a build, a run or its output failed
	exitUsage  = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is what the flags ask for.
type config struct {
	base      string // the revision to compare with
	tree      string // a directory of the working tree
	rounds    int
	benchtime time.Duration // 0: reins bench's default
	baseBin   string        // a reins binary to use instead of building base
	treeBin   string        // a reins binary to use instead of building the tree
	keep      bool          // keep the binaries and each run's JSON
	// testBins also times the 64 loops through each side's benchmark test binary (testbin.go);
	// baseTest and treeTest are test binaries to use instead of building them.
	testBins           bool
	baseTest, treeTest string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("abbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.base, "base", baseline, "the base `revision` to build and compare with (a commit, tag or branch of the tree's repository)")
	fs.StringVar(&c.tree, "tree", ".", "a `directory` of the working tree to build, uncommitted changes included")
	fs.IntVar(&c.rounds, "rounds", 2, "rounds of one run per binary: base first in odd rounds, the tree first in even ones")
	fs.DurationVar(&c.benchtime, "benchtime", 0, "passed to both binaries' reins bench --benchtime (default: theirs, 1s)")
	fs.StringVar(&c.baseBin, "base-bin", "", "a reins `binary` to run as the base instead of building --base")
	fs.StringVar(&c.treeBin, "tree-bin", "", "a reins `binary` to run as the tree instead of building --tree")
	fs.BoolVar(&c.keep, "keep", false, "keep the temporary directory: the binaries and each run's JSON")
	fs.BoolVar(&c.testBins, "test-binaries", false, "also time the 64 loops through each side's benchmark test binary (go test -c), alternated in each round, after the reins bench runs in rounds 1 and 2 of every four and before them in rounds 3 and 4: steadier than reins bench's rounds")
	fs.StringVar(&c.baseTest, "base-test-bin", "", "with --test-binaries, a test `binary` to run as the base's instead of building it")
	fs.StringVar(&c.treeTest, "tree-test-bin", "", "with --test-binaries, a test `binary` to run as the tree's instead of building it")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./cmd/reins/internal/abbench [flags]\n\nBuilds --base and the working tree alike, runs reins bench --only %s --json with both alternately\nand prints each figure's ratio tree/base per round and their median (BENCHMARKS.md, \"Drift against the baseline\").\n\n", joinNames())
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected argument %q: abbench takes flags only", fs.Arg(0))
	case c.rounds < 1:
		return c, fmt.Errorf("--rounds %d: want at least 1 (2 for a verdict)", c.rounds)
	case c.benchtime < 0:
		return c, fmt.Errorf("--benchtime %s: want more than 0", c.benchtime)
	case c.base == "" && c.baseBin == "":
		return c, errors.New("--base is empty: name a revision, or a binary with --base-bin")
	case (c.baseTest != "" || c.treeTest != "") && !c.testBins:
		return c, errors.New("--base-test-bin and --tree-test-bin go with --test-binaries")
	case c.testBins && c.base == "" && c.baseTest == "":
		return c, errors.New("--base is empty: --test-binaries builds the base's test binary from it, or name one with --base-test-bin")
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "abbench:", err)
		return exitUsage
	}
	if err := compareBinaries(ctx, cfg, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "abbench:", err)
		return exitFailed
	}
	return exitOK
}

// compareBinaries builds (or takes) both binaries in a directory of its own, measures them
// and prints the table.
func compareBinaries(ctx context.Context, cfg config, stdout, stderr io.Writer) (err error) {
	dir, err := os.MkdirTemp("", "abbench-")
	if err != nil {
		return err
	}
	defer func() {
		if cfg.keep {
			fmt.Fprintf(stderr, "abbench: kept %s (the binaries and each run's JSON)\n", dir)
			return
		}
		err = errors.Join(err, os.RemoveAll(dir))
	}()
	base, tree, err := prepare(ctx, cfg, dir, stderr)
	if err != nil {
		return err
	}
	rounds, err := measure(ctx, cfg, dir, base, tree, stderr)
	if err != nil {
		return err
	}
	h := header{base: base.label, tree: tree.label, rounds: cfg.rounds, testBins: cfg.testBins}
	if cfg.benchtime > 0 {
		h.benchtime = cfg.benchtime.String()
	}
	return printTable(stdout, h, compare(rounds))
}
