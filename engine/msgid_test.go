package engine

import (
	"fmt"
	"strings"
	"testing"
)

// FuzzTaskMsgID: the id built in a buffer on the stack equals the plain RUN/KEY/ACTIVATION/
// ITERATION/ATTEMPT, ids longer than the buffer included.
func FuzzTaskMsgID(f *testing.F) {
	f.Add("r-1", "fan#3", 1, 2, 1)
	f.Add(strings.Repeat("r", 120), "ask", -1, 0, 99999)
	f.Fuzz(func(t *testing.T, run, key string, activation, iteration, attempt int) {
		want := fmt.Sprintf("%s/%s/%d/%d/%d", run, key, activation, iteration, attempt)
		if got := taskMsgID(run, key, activation, iteration, attempt); got != want {
			t.Fatalf("taskMsgID = %q, want %q", got, want)
		}
	})
}

// TestTaskMsgIDAllocs: a task's id is one allocation, its string.
func TestTaskMsgIDAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = taskMsgID("01JDV3N6Q0R1S2T3U4V5W6X7Y8", "agent", 1, 12, 1) }); n != 1 {
		t.Errorf("taskMsgID allocates %v times, want 1", n)
	}
}
