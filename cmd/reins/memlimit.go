package main

import (
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/reins-run/reins/operator"
)

// memoryLimit applies serve's --memory-limit: the Go runtime's soft memory limit, as GOMEMLIMIT
// sets it, for the whole process (engine, workers, embedded server). The heap otherwise grows
// to twice what stays live before it collects; under the limit it collects sooner, at the
// price of CPU. "" leaves the runtime's limit (GOMEMLIMIT's, or none).
func memoryLimit(flag string, log *slog.Logger) error {
	if flag == "" {
		return nil
	}
	n, err := operator.ParseBytes(flag)
	if err != nil {
		return &exitError{code: exitUsage, err: fmt.Errorf("--memory-limit %s: %w", flag, err)}
	}
	debug.SetMemoryLimit(n)
	log.Info("reins: the Go heap collects to stay under the memory limit", "memory_limit_bytes", n)
	return nil
}
