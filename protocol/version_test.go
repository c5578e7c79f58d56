package protocol

import (
	"strconv"
	"strings"
	"testing"
)

// TestCheckVersion: a task without a version is of version 1; a task of Version is taken; any
// other is refused in one sentence naming both versions.
func TestCheckVersion(t *testing.T) {
	if VersionOf(0) != 1 || VersionOf(Version) != Version {
		t.Fatalf("VersionOf(0) = %d, VersionOf(%d) = %d", VersionOf(0), Version, VersionOf(Version))
	}
	for _, v := range []int{0, Version} {
		if err := CheckVersion(&Task{MsgID: "r/s/1/1/1", Protocol: v}); err != nil {
			t.Errorf("protocol %d: %v", v, err)
		}
	}
	for v, advice := range map[int]string{Version + 1: "upgrade the worker", -1: "upgrade the engine"} {
		err := CheckVersion(&Task{MsgID: "r/s/1/1/1", Protocol: v})
		if err == nil {
			t.Fatalf("protocol %d: taken", v)
		}
		for _, want := range []string{"task r/s/1/1/1", "version " + strconv.Itoa(v), "this worker speaks version " + strconv.Itoa(Version), advice} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("protocol %d: %q does not say %q", v, err, want)
			}
		}
	}
}
