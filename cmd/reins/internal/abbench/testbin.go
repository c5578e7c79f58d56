package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// The 64 loops through the benchmarks' test binaries (--test-binaries). Rounds of
// agent_loop_64 through reins bench are bimodal on a small machine (one binary gave 9,754 and
// 16,206 iterations/s a minute apart); the same benchmark through `go test -c` of each side's
// bench package, for a fixed number of iterations, varies far less (BENCHMARKS.md, "Recorded
// against the baseline").

// benchTest64 names the result of a test binary's run in a round's results.
const benchTest64 = "agent_loop_64, test binary"

// testBenchmark is the benchmark a test binary runs, and its arguments.
const testBenchmark = "BenchmarkAgentLoopThroughput64"

var testArgs = []string{"-test.run", "^$", "-test.bench", "^" + testBenchmark + "$", "-test.benchtime", "40000x", "-test.benchmem"}

// testPackages are where a revision keeps its benchmarks: cmd/reins/internal/bench now, bench
// before (the baseline's).
var testPackages = []string{"cmd/reins/internal/bench", "bench"}

// buildTest builds the benchmarks' test binary of the module at src into out.
func buildTest(ctx context.Context, src, out string) error {
	for _, pkg := range testPackages {
		if _, err := os.Stat(filepath.Join(src, pkg)); err != nil {
			continue
		}
		return goIn(ctx, src, []string{"GOWORK=off"}, "test", "-c", "-o", out, "./"+pkg)
	}
	return fmt.Errorf("no benchmark package in %s (looked for %s)", src, strings.Join(testPackages, ", "))
}

// testOnce runs one side's test binary once and reads its benchmark line.
func testOnce(ctx context.Context, b binary, save string, stderr io.Writer) (result, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, b.test, testArgs...)
	cmd.Stdout, cmd.Stderr = &out, stderr
	cmd.Dir = filepath.Dir(b.test)
	if err := cmd.Run(); err != nil {
		return result{}, fmt.Errorf("%s %s: %w: %s", b.test, strings.Join(testArgs, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	if err := os.WriteFile(save, out.Bytes(), 0o644); err != nil {
		return result{}, err
	}
	r, err := parseBenchLine(out.Bytes(), testBenchmark)
	if err != nil {
		return result{}, fmt.Errorf("what %s printed: %w", b.test, err)
	}
	return r, nil
}

// parseBenchLine reads the line of benchmark name in what `go test -bench` printed ("NAME-P
// N V UNIT V UNIT ..."): ns/op and allocs/op, and every other unit as an extra figure.
func parseBenchLine(out []byte, name string) (result, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || (fields[0] != name && !strings.HasPrefix(fields[0], name+"-")) {
			continue
		}
		return benchFields(fields, name)
	}
	if err := sc.Err(); err != nil {
		return result{}, err
	}
	return result{}, fmt.Errorf("no line of %s", name)
}

// benchFields reads one benchmark line split into fields.
func benchFields(fields []string, name string) (result, error) {
	if len(fields) < 4 || len(fields)%2 != 0 {
		return result{}, fmt.Errorf("the line of %s has %d fields, not a name, a count and pairs of a value and its unit", name, len(fields))
	}
	if n, err := strconv.ParseUint(fields[1], 10, 64); err != nil || n == 0 {
		return result{}, fmt.Errorf("the line of %s counts %q iterations, not a positive number", name, fields[1])
	}
	r := result{Name: benchTest64, Extra: map[string]float64{}}
	for i := 2; i < len(fields); i += 2 {
		v, err := strconv.ParseFloat(fields[i], 64)
		if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return result{}, fmt.Errorf("the line of %s has %q %s, not a figure", name, fields[i], fields[i+1])
		}
		switch unit := fields[i+1]; unit {
		case "ns/op":
			r.NsPerOp = v
		case "allocs/op":
			if v != math.Trunc(v) || v > math.MaxInt64/2 {
				return result{}, fmt.Errorf("the line of %s has %q allocs/op, not a whole number", name, fields[i])
			}
			r.AllocsPerOp = int64(v)
		default:
			r.Extra[unit] = v
		}
	}
	return r, nil
}
