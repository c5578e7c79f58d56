// Package runstore is what the engine's side stores in NATS: the record of a run (the engine's
// run state and the parent waiting for it, encoded without reflection with internal/wire's
// Encoder after every decision), the keys of the status index, a run's values by reference
// (OutRun, InRun), and the workflow bundles stored by hash for engines, clients and the
// built-in handlers (NewBundles, Store).
//
// It encodes and decodes; it must not decide anything (package engine does) or read or write a
// bucket but the workflows bucket through Store (the engine's shell and the client own the runs
// bucket). A worker that serves only its own handlers does not link it.
package runstore
