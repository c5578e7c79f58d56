// Package runstore is what the engine's side stores in NATS: the record of a run
// ([engine.Record]: the engine's run state and the parent waiting for it, encoded without
// reflection with internal/wire's Encoder after every decision), the keys of the status index,
// a run's values by reference (OutRun, InRun), and the workflow bundles ([workflow.Bundles])
// stored by hash for engines, clients and the built-in handlers (PutBundles, Store).
//
// The types it stores are public in engine and workflow, so that public APIs name them; it
// owns only how they are stored.
//
// It encodes and decodes; it must not decide anything (package engine does) or read or write a
// bucket but the workflows bucket through Store (the engine's shell and the client own the runs
// bucket). A worker that serves only its own handlers does not link it.
package runstore
