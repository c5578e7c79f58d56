package main

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/reins-run/reins/operator"
)

// memoryLimit applies serve's --memory-limit: the Go runtime's soft memory limit, as GOMEMLIMIT
// sets it, for the whole process (engine, workers, embedded server). The heap otherwise grows
// to twice what stays live before it collects; under the limit it collects sooner, at the
// price of CPU. "" leaves GOMEMLIMIT's limit, or without one takes containerShare of the
// memory limit that group reports (serve gives [memlimit.FromCgroup]: the process's control
// group, v1 or v2, the smallest limit of its group and those above it).
func memoryLimit(flag string, group memlimit.Provider, log *slog.Logger) error {
	if flag == "" {
		containerLimit(group, log)
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

// containerShare is the part of a control group's memory limit that serve takes as its soft
// limit by default. The rest is for what the soft limit does not count and the group is
// charged for: the binary's pages and the page cache of the data directory's files. A heap
// that doubles in a burst would otherwise pass the group's limit, and the kernel kills the
// process.
const containerShare = 0.9

// containerLimit sets the soft limit to containerShare of the limit group reports, unless
// GOMEMLIMIT sets one or AUTOMEMLIMIT is "off" (AUTOMEMLIMIT=0.8 takes another share). A
// group without a limit leaves the runtime's; one that cannot be read is logged and changes
// nothing.
func containerLimit(group memlimit.Provider, log *slog.Logger) {
	before := debug.SetMemoryLimit(-1)
	limit, err := memlimit.Set(memlimit.WithProvider(keepWithoutLimit(group)), memlimit.WithRatio(containerShare),
		memlimit.WithLogger(slog.New(slog.DiscardHandler)))
	switch {
	case errors.Is(err, errNoGroupLimit):
	case err != nil:
		log.Warn("reins: no default memory limit: the control group's limit cannot be read", "err", err)
	case limit != before: // not left as it was (GOMEMLIMIT, AUTOMEMLIMIT=off)
		log.Info("reins: the Go heap collects to stay under the memory limit, a share of the control group's", "memory_limit_bytes", limit)
	}
}

// errNoGroupLimit stands for [memlimit.ErrNoLimit], on which the library would set the
// largest limit: a group without a limit leaves the runtime's as it is.
var errNoGroupLimit = errors.New("the control group has no memory limit")

func keepWithoutLimit(group memlimit.Provider) memlimit.Provider {
	return func() (uint64, error) {
		n, err := group()
		if errors.Is(err, memlimit.ErrNoLimit) {
			return 0, errNoGroupLimit
		}
		return n, err
	}
}
