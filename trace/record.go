package trace

import "github.com/reins-run/reins/protocol"

// The record of an iteration travels with a worker's answer, so its types are package
// protocol's; these names are the ones loops, handlers and readers of runs know them by.
type (
	// Iteration is the record of one iteration of a loop, or of one part of it
	// ([protocol.Iteration]): what the model proposed, what the loop decided about each call and
	// why, what the calls returned, what it cost and how it ended, with its trace events.
	Iteration = protocol.Iteration
	// ProposalRecord is a model's proposal in an [Iteration] ([protocol.ProposalRecord]).
	ProposalRecord = protocol.ProposalRecord
	// CallRecord is one proposed tool call in an [Iteration] ([protocol.CallRecord]).
	CallRecord = protocol.CallRecord
	// Keep stores a whole text that [protocol.Iteration.Clip] shortens and returns a reference to it
	// ([protocol.Keep]).
	Keep = protocol.Keep
)

// ClipText returns s cut to at most max bytes at a rune boundary, followed by a marker saying
// how many bytes were left out; s itself when it is not longer than max ([protocol.ClipText]).
func ClipText(s string, max int) string { return protocol.ClipText(s, max) }
