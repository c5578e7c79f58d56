package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func joinNames() string { return strings.Join(benchmarks, ",") }

// measure runs both binaries once per round, base first in odd rounds and the tree first in
// even ones, so that neither always runs on a machine the other has just warmed or loaded.
// With test binaries, both sides' test binaries run after both reins bench runs in the first
// two rounds of every four and before them in the last two ([testsFirst]), in the round's order
// of sides: each of a round's four runs takes each of its four places once in four rounds, so
// that no figure always runs where the machine's own rhythm, or the run before it, leaves it.
func measure(ctx context.Context, cfg config, dir string, base, tree binary, stderr io.Writer) ([]round, error) {
	args := []string{"bench", "--only", joinNames(), "--json"}
	if cfg.benchtime > 0 {
		if err := takesBenchtime(ctx, base, tree); err != nil {
			return nil, fmt.Errorf("--benchtime %s: %w", cfg.benchtime, err)
		}
		args = append(args, "--benchtime", cfg.benchtime.String())
	}
	rounds := make([]round, cfg.rounds)
	for i := range rounds {
		order := []binary{base, tree}
		if (i+1)%2 == 0 {
			order = []binary{tree, base}
		}
		benches := func() error { return benchRound(ctx, i, cfg.rounds, order, args, dir, &rounds[i], stderr) }
		tests := func() error { return testRound(ctx, i, cfg.rounds, order, dir, &rounds[i], stderr) }
		steps := []func() error{benches, tests}
		if testsFirst(i) {
			steps = []func() error{tests, benches}
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return nil, err
			}
		}
	}
	return rounds, nil
}

// testsFirst reports whether round i (from 0) runs the test binaries before reins bench: the
// last two rounds of every four.
func testsFirst(i int) bool { return i%4 >= 2 }

// benchRound runs reins bench with each binary of order, round i of n, into r.
func benchRound(ctx context.Context, i, n int, order []binary, args []string, dir string, r *round, stderr io.Writer) error {
	for _, b := range order {
		fmt.Fprintf(stderr, "abbench: round %d of %d, %s (%s)\n", i+1, n, b.side, b.label)
		rs, err := benchOnce(ctx, b, args, filepath.Join(dir, fmt.Sprintf("round%d-%s.json", i+1, b.side)), stderr)
		if err != nil {
			return fmt.Errorf("round %d, %s (%s): %w", i+1, b.side, b.path, err)
		}
		r.add(b.side, rs)
	}
	return nil
}

// testRound runs the test binary of each binary of order that has one, round i of n, into r.
func testRound(ctx context.Context, i, n int, order []binary, dir string, r *round, stderr io.Writer) error {
	for _, b := range order {
		if b.test == "" {
			continue
		}
		fmt.Fprintf(stderr, "abbench: round %d of %d, %s's test binary\n", i+1, n, b.side)
		res, err := testOnce(ctx, b, filepath.Join(dir, fmt.Sprintf("round%d-%s-test.txt", i+1, b.side)), stderr)
		if err != nil {
			return fmt.Errorf("round %d, %s's test binary: %w", i+1, b.side, err)
		}
		r.add(b.side, results{benchTest64: res})
	}
	return nil
}

// benchOnce runs one reins bench, keeps its JSON in save and reads it; the binary's progress
// goes to stderr as it comes.
func benchOnce(ctx context.Context, b binary, args []string, save string, stderr io.Writer) (results, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, b.path, args...)
	cmd.Stdout, cmd.Stderr = &out, stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("reins %s: %w (its output is above)", strings.Join(args, " "), err)
	}
	if err := os.WriteFile(save, out.Bytes(), 0o644); err != nil {
		return nil, err
	}
	rs, err := parseResults(out.Bytes())
	if err != nil {
		return nil, fmt.Errorf("what reins bench --json printed: %w", err)
	}
	return rs, rs.require(benchmarks)
}

// takesBenchtime checks that both binaries' reins bench take --benchtime (the baseline
// predates it), so that both run alike.
func takesBenchtime(ctx context.Context, bins ...binary) error {
	for _, b := range bins {
		help, err := exec.CommandContext(ctx, b.path, "bench", "--help").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s --help: %w", b.path, err)
		}
		if !bytes.Contains(help, []byte("--benchtime")) {
			return fmt.Errorf("the %s's reins bench (%s) has no --benchtime flag; leave it out and both run with their default, 1s", b.side, b.label)
		}
	}
	return nil
}
