package main

import (
	"fmt"
	"io"

	"github.com/reins-run/reins/protocol"
)

// A run is orphaned when it is running or queued on a data directory whose embedded server no
// process runs: the command that ran it was stopped (killed, or its machine went down) before
// the run ended, and nothing decides for it until a process runs the engine there again. The
// command that finds the directory free (it runs the server itself, withClientAlone) knows
// this for sure: an engine runs only in the process holding the directory.

// orphanable says whether a run in status st is orphaned when no engine runs.
func orphanable(st protocol.RunStatus) bool {
	return st == protocol.RunRunning || st == protocol.RunQueued
}

// noteOrphans tells, once, what finishes the orphaned runs among entries.
func noteOrphans(w io.Writer, entries []listEntry, nf *natsFlags) {
	n := 0
	for _, e := range entries {
		if e.Orphaned {
			n++
		}
	}
	if n > 0 {
		what, them := "1 run is", "it"
		if n > 1 {
			what, them = fmt.Sprintf("%d runs are", n), "them"
		}
		fmt.Fprintf(w, "reins: %s orphaned: no process runs the engine on the data directory %s (the command that ran it was stopped); %s\n",
			what, nf.data, finishOrphans(nf, them))
	}
}

// finishOrphans is the sentence that says which command finishes orphaned runs (them: "it" or
// "them").
func finishOrphans(nf *natsFlags, them string) string {
	return fmt.Sprintf("reins serve --data %s carries %s on to the end", shellWord(nf.data), them)
}

// noteOrphan tells that run id is orphaned, and what finishes it.
func noteOrphan(w io.Writer, id string, nf *natsFlags) {
	fmt.Fprintf(w, "reins: run %s is orphaned: no process runs the engine on the data directory %s (the command that ran it was stopped); %s\n",
		id, nf.data, finishOrphans(nf, "it"))
}

// noteNoEngine tells that what was sent (what) waits for an engine, which no process runs on
// the data directory.
func noteNoEngine(w io.Writer, what string, nf *natsFlags) {
	fmt.Fprintf(w, "reins: note: no process runs the engine on the data directory %s: %s takes effect when one does (reins serve --data %s, or the next reins run there)\n",
		nf.data, what, shellWord(nf.data))
}
