// Package fault is the fault injection of crash tests: an environment variable that makes a
// process die at a chosen point, so that a test can kill it exactly where the algorithm must
// survive. It is internal: no program of a user sets it on purpose.
//
// It owns the variable's name and syntax; it must not decide where a process dies (the package
// that reads it does: runner dies before its N-th save, or before its N-th release of a
// concurrency key).
package fault

import (
	"fmt"
	"strconv"
	"strings"
)

// Env names the environment variable: "POINT:N" kills the process at the N-th time it reaches
// POINT (runner's "kill-before-save" and "kill-before-release").
const Env = "REINS_FAULT"

// Parse reads the value of Env for point: N (0 when value is empty), or an error saying what
// the value should be.
func Parse(value, point string) (int64, error) {
	if value == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(value, point+":"), 10, 64)
	if !strings.HasPrefix(value, point+":") || err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want %s:N with N a positive integer", Env, value, point)
	}
	return n, nil
}
