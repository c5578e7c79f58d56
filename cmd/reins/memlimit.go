package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/reins-run/reins/operator"
)

// memoryLimit applies serve's --memory-limit: the Go runtime's soft memory limit, as GOMEMLIMIT
// sets it, for the whole process (engine, workers, embedded server). The heap otherwise grows
// to twice what stays live before it collects; under the limit it collects sooner, at the
// price of CPU. "" leaves GOMEMLIMIT's limit, or without one takes containerShare of the
// memory limit of the process's control group, read from sys (the root of /proc and /sys).
func memoryLimit(flag string, sys fs.FS, log *slog.Logger) error {
	if flag == "" {
		containerLimit(sys, log)
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

// containerLimit sets the soft limit to containerShare of the control group's memory limit
// when GOMEMLIMIT sets none. A control group file it cannot read is logged and changes nothing.
func containerLimit(sys fs.FS, log *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	group, err := cgroupMemoryLimit(sys)
	if err != nil {
		log.Warn("reins: no default memory limit", "err", err)
		return
	}
	if group <= 0 {
		return
	}
	n := int64(float64(group) * containerShare)
	debug.SetMemoryLimit(n)
	log.Info("reins: the Go heap collects to stay under the memory limit, 90% of the control group's", "memory_limit_bytes", n, "cgroup_limit_bytes", group)
}

// noCgroupLimit: a control group limit from here up is none (cgroup v1 writes "no limit" as
// the largest page-aligned int64).
const noCgroupLimit = 1 << 62

// cgroupMemoryLimit returns the memory limit of the control group the process is in, in
// bytes: the smallest limit of its group and the groups above it, in cgroup v2
// (memory.max) and v1 (memory.limit_in_bytes). 0: none, or no control group to read.
func cgroupMemoryLimit(sys fs.FS) (int64, error) {
	groups, err := fs.ReadFile(sys, "proc/self/cgroup")
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var limit int64
	sc := bufio.NewScanner(bytes.NewReader(groups))
	for sc.Scan() {
		root, file, dir, ok := cgroupMemoryDir(sc.Text())
		if !ok {
			continue
		}
		n, err := smallestLimit(sys, root, dir, file)
		if err != nil {
			return 0, err
		}
		if n > 0 && (limit == 0 || n < limit) {
			limit = n
		}
	}
	return limit, sc.Err()
}

// cgroupMemoryDir reads a line of /proc/self/cgroup (ID:CONTROLLERS:PATH): the mount of the
// hierarchy that holds memory limits, the file of the limit there, and the group's path under
// the mount. ok is false for another controller's line.
func cgroupMemoryDir(line string) (root, file, dir string, ok bool) {
	parts := strings.SplitN(line, ":", 3)
	if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
		return "", "", "", false
	}
	if parts[0] == "0" && parts[1] == "" {
		return "sys/fs/cgroup", "memory.max", path.Clean(parts[2]), true
	}
	for c := range strings.SplitSeq(parts[1], ",") {
		if c == "memory" {
			return "sys/fs/cgroup/memory", "memory.limit_in_bytes", path.Clean(parts[2]), true
		}
	}
	return "", "", "", false
}

// smallestLimit is the smallest limit in file of group dir and its parents up to the
// hierarchy's root (0: none). A group whose directory is not mounted here (a container that
// sees the host's path of its group) is skipped.
func smallestLimit(sys fs.FS, root, dir, file string) (int64, error) {
	var limit int64
	for {
		name := path.Join(root, dir, file)
		data, err := fs.ReadFile(sys, name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return 0, err
		default:
			n, err := parseCgroupLimit(data)
			if err != nil {
				return 0, fmt.Errorf("/%s: %w", name, err)
			}
			if n > 0 && (limit == 0 || n < limit) {
				limit = n
			}
		}
		if dir == "/" {
			return limit, nil
		}
		dir = path.Dir(dir)
	}
}

// parseCgroupLimit reads a limit file: "max" or a number of bytes (0: none).
func parseCgroupLimit(data []byte) (int64, error) {
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want a number of bytes or max, not %q", s)
	}
	if n >= noCgroupLimit || n > math.MaxInt64 {
		return 0, nil
	}
	return int64(n), nil
}
