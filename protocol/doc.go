// Package protocol holds the types that cross process boundaries: the Task a worker runs, the
// Event that moves a run (a worker's answer, a client's start, cancel, decision or signal, the
// engine's own ticks), the Usage a task reports, the Iteration record an answer carries (what
// one iteration of a loop did, with its trace events), and the Result a client reads when a run
// ends, with the run and step statuses, error codes and labels they carry.
//
// The engine decides with these types, workers and clients exchange them over NATS, and the
// root package reins re-exports the ones a program needs; none of them owns the types.
// Their JSON is the wire format (package internal/wire encodes it): a field's name or meaning
// changes only with every process that reads it.
//
// It holds data and the few methods that read it, and imports nothing of reins: a worker links
// it without the engine, the workflow model or the loop. It must not import anything that does
// I/O or decides.
package protocol
