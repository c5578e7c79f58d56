// Package client is the client of runs: it starts, reads, lists, watches, waits for, cancels,
// decides, resumes, signals, replays, forks and prunes the runs of a reins deployment, over a
// NATS connection, as the reins command, package reins and the HTTP API do. A program with no
// engine of its own reaches a server with [Dial]; one that has a connection ([conn.Conn])
// makes a client with [New].
// A Client acts as one principal: a shared server's permissions decide what it may do, and it
// says so in one sentence ([ErrForbidden]) before it sends anything.
//
// It owns the client's side of the protocol: the events a person sends (on the subjects of its
// principal), the reading of run records (Record) and of a run's events, the run Result
// (docs/reference/workflow-file.md), replay against a definition, the fork of a run into a new one, and
// retention; the registry of workflows registered by name, with who may add versions to each
// (Access), and a run's Origin (who started it, which registered version it runs). The run
// ids a client chooses stay out of those the server gives (wire.CheckClientRunID). It must not decide (engine.Decide does, in the engine's shell, package runner),
// and it does not import the shell: the one thing both send alike, a forked run's tasks, goes
// through package outbox.
package client
