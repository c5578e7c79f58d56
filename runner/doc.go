// Package runner is the durable engine's NATS JetStream shell around the pure decision core,
// package engine: it feeds engine.Start and engine.Decide the events of REINS_EVENTS, saves the
// run state they return in the reins_runs bucket with compare-and-set, and carries out their
// commands (publish tasks, schedule ticks, dead-letter tasks, start and cancel sub-runs, announce
// the end of runs). Package client starts, reads, watches and cancels runs; this package does
// not serve clients.
//
// It owns the consumer of the engine, the per-run serialization of events, the cache of run
// state, the in-memory timers and the records of reins_runs. It must not make decisions: which
// step runs, with what input, when a step retries, stops or fails and how a run ends are
// engine.Decide's, and the shell only does what the commands say (and reports what it could
// not deliver as an event, for Decide to decide on). It must not run handlers (package worker
// does) nor create streams or buckets other than through natsbox.EnsureLayout.
//
// # Consuming
//
// The events of a run travel in its partition (natsbox.Partition: a hash of the run id, one of
// natsbox.Partitions), and each partition has a durable pull consumer, "reins-engine-NN", read
// with explicit acks by one engine at a time: its owner. Engines share the partitions through
// natsbox.EnginesBucket (partitions.go has the rules, leases.go carries them out): each writes a
// heartbeat every LeaseTTL/6, none waiting for the one before; the live engine with the highest
// rendezvous hash of (engine, partition) should own each one; an owner hands over what it should
// not own (it stops pulling, settles and saves what it pulled, then deletes the partition's key)
// and the engine that should own it creates the key; an engine not heard for LeaseTTL (1.2s by
// default), in a watch that shows the observer's own heartbeats meanwhile and by the bucket's
// leader, loses its partitions to the others, who make their consumers again (all at once) from
// the acknowledged floor, so that
// what the dead engine had not acknowledged comes at once (not after AckWait) and its pulls
// reach nobody. A consumer found missing (a takeover deleted it and its creation failed) is
// made from the highest floor any engine saw of it (floors.go), not from the partition's first
// event. When a consumer's leader changes (a NATS node stopped or lost) or the engine's
// connection comes back, the consumer is reset to its acknowledged floor (redeliver), so that
// a delivery lost on its way comes at once rather than after AckWait. One
// engine alone owns them all, and reads them through one consumer, "reins-engine-all"
// (natsbox.EngineAllConsumer, solo.go): sixteen cost the server sixteen writes of their state
// and reads past the other partitions' events (alone from the start, it makes theirs and does
// not read them); it goes back to the partitions' consumers, each
// moved past what that one acknowledged, when another engine comes. An engine that stops hands
// everything over.
//
// Events are dispatched by a hash of their run id to a fixed set of shard goroutines: the events
// of one run are decided one at a time and in order, while runs proceed in parallel. A shard keeps
// the runs it decided (record, revision, definition) in a cache; a run that finished leaves it,
// and so does the least recently decided one beyond the shard's share of [Config.CachedRuns]
// ([DefaultCachedRuns], 1024), its waiting save made first: thousands of runs waiting for a human
// or a timer cost the bucket, not the engine's memory, and the next event of a run let go reads
// it back as after a restart. A cached run of a partition that moved to another engine and back
// is stale, which the next save's compare-and-set finds (below).
//
// # One event
//
// The order of the steps below is what makes a crash at any point safe.
//
//  1. Decode the event (wire.DecodeEventInto, into an event kept from one settled before: an
//     event is read only until its message is settled). A malformed body, or a body whose run id is not its
//     subject's (or a subject in another partition than its run's), is terminated (Term) with
//     one log line: it can never be decided. The subject says who sent it (wire.Sender): a
//     worker on the run's subject, a person on its own (submit, human), the engine on
//     natsbox.Names.EngineSubject. An event its sender may not send there (wire.CheckSender: a
//     worker's anything but an answer, a person's start of a sub-run or of an id of the
//     server's space, a person's tick or child_finished, a non-admin's OnBehalfOf) is refused:
//     terminated, counted apart (EngineStats.Refused), logged at warn in one sentence naming
//     the sender and what it may not do.
//  2. start: a run that already has a record was started before (a duplicate): ack. A sub-run's
//     start (Parent, from the engine's subject) begins only when its parent's saved record has
//     it in flight (engine.AwaitsChild); while it does not, it is held back (20ms, doubling to
//     5s) for up to 20 deliveries, as the parent publishes it before saving, then refused; a parent that ended
//     refuses it at once. Else read the bundle of the start event's Workflow, admit the run
//     ([Config.Admit], every start, a sub-run's too), engine.Start, carry out the commands,
//     create the record (KeyValue.Create), then ack.
//  3. Any other event: with no record yet, the event is held back (NakWithDelay, 250ms growing
//     to 5s) for up to 20 deliveries, then terminated with a log line. An event engine.Ahead
//     reports ahead of the state is held back too, until the run ends: the decision that
//     dispatched its task was published but not saved (an engine crashed in between), and it is
//     decided again when its own event comes back. Else
//     engine.Decide; nothing changed and nothing to do: ack. Else carry out the commands, THEN
//     save the record with compare-and-set (KeyValue.Update on the cached revision), THEN ack.
//  4. The save of a decision that only dispatches the next task of a running run (an answer that
//     continues a loop or completes a step) may wait, up to [Config.SaveWindow] (100ms) and
//     maxWaiting decisions of the run: the task is out at once, the event stays unacknowledged,
//     and one save covers the run's decisions of the window, then acknowledges their events
//     (saves.go). Any other decision of the run, the window's end, an eviction from the cache and
//     the engine's stop save what waits; a failed save hands its events back to be decided again.
//
// Publishing before saving: a crash after publishing and before saving delivers the event again,
// which is decided again on the same state with the same time (Event.At), so it gives the same
// commands with the same message ids, and JetStream's duplicate window drops the copies. With
// saves waiting, a crash delivers every event since the last save again, and they are decided
// again in order on the saved state. (A server that dies too, the embedded one, rebuilds its
// duplicate window from the messages it still holds: a task a worker already acknowledged is
// gone, so its copy is stored and runs again; its answer is stale and changes nothing.) A
// compare-and-set conflict (another writer saved the run since it was cached) drops the cached
// copy, reloads the run and decides the event again. An event that decides nothing on a cached
// copy is decided again on a fresh copy before it is acknowledged, so a stale cache can delay an
// event but never lose one.
//
// # Commands
//
//   - dispatch: the task (wire.EncodeTask) on its handler's subject with the task's MsgID. A task
//     that cannot be sent (larger than the server's max payload, or a handler that is not a
//     subject token) is answered instead by a permanent failed event on the run's own subject,
//     which Decide dead-letters.
//   - dead_letter: the task on natsbox.DLQSubject(handler), with the header Reins-Reason.
//   - start_child, cancel_child: a start event (with Parent) or a cancel event to the sub-run, on
//     the sub-run's engine subject, as every event the engine makes (ticks, child_finished,
//     granted; outbox.EventMsg). A sub-run that cannot start (its workflow is not stored, its
//     start event is too large) is reported to the run that waits for it as a failed
//     child_finished event, which names the sub-run (Child) as every child_finished does.
//   - schedule: an in-memory timer publishing a tick event (wire.EventMsgID) at the command's At.
//     A task's watch fires later by as much as its task went out after the time of the decision
//     (Command.Dispatched): an event decided late, behind a backlog, dispatches a task whose
//     watch is due already by the event's time, and its worker gets its whole timeout and
//     grace all the same. A run read from the bucket counts from the time of its save.
//     Timers are not stored: an engine that takes a partition arms them again from the state of
//     its running runs (engine.Timers), and stops them when it lets the partition go; so does a
//     shard that loads a run another engine decided.
//   - acquire (a start of a workflow with a concurrency key): before the run is saved, the run
//     enters its key's record in natsbox.ConcurrencyBucket; when it holds a slot at once, the
//     granted event is decided at once on the queued state, in the same save (slots.go has
//     the rules). A granted event that comes later is checked against the record first.
//   - release: with the finish, after the save (and again whenever an event of the ended run
//     comes back, whatever its delivery count): the run leaves its key, by run id, and the
//     freed slot goes to the next queued run, which is sent a granted event.
//   - finish: after the save, cancel events to the sub-runs still in flight (engine.SubRuns), a
//     child_finished event to the parent run when there is one, and the run id on
//     natsbox.CancelSubject (core NATS) so that workers stop handlers still running for it. An
//     event of a finished run that comes back (delivered again after a crash or a failure to
//     publish) publishes these again: all of them are idempotent.
//
// All the messages of one decision are published asynchronously and their acknowledgements
// awaited together before the save.
//
// # Fault injection
//
// Crash tests set REINS_FAULT=kill-before-save:N in the environment of an engine process: it
// exits (status 86) right before its N-th save, after carrying out the commands of the decision;
// REINS_FAULT=kill-before-release:N, right before its N-th release of a concurrency key, after
// the save of the run that ended.
//
// # Limits
//
// A run's record must fit in one message of the reins_runs bucket (the server's max payload,
// 1 MiB by default). Values larger than 64 KiB go to the values' store by reference
// (wire.Values: encode stores them, load and takeValues read them back), so only a state of
// many small values can pass it; such a state is decided again (tooLarge) rather than retried.
package runner
