// Package trigger starts runs of registered workflows by themselves: on the due times of a
// schedule, on each message of a NATS subject, and on each delivery of a webhook (the
// [[triggers]] of workflow files; docs/workflows.md, "Triggers"). A Service runs in every
// reins serve process, several at once on one NATS server.
//
// The rules are pure and live here: which due times of a schedule start a run now, given the
// trigger, what was decided before, whether the previous run still runs and the time (Plan);
// the id of the run a due time, a message or a delivery starts ([RunID]), the same in every
// process, so that a start made twice starts one run; the signature of a webhook delivery
// (Sign, Verify). The Service is a thin shell around them: it follows the registry of workflows
// (client), keeps each schedule's state in the bucket natsbox.Names.TriggersBucket with
// compare-and-set, consumes subject triggers through the stream of the operator's subjects
// (natsbox.Names.TriggersStream, a durable consumer per trigger), and starts runs with
// client.StartOptions.As as the principal that registered the workflow: on the engine's subject of the
// run, the only one on which the engine takes a start whose id is a trigger's ("t-…", in the
// server's space: wire.ServerRunID), so that no person can take a due time's run id first.
//
// It must not decide anything about runs once started (engine.Decide does), check who may call
// a webhook (package api checks the signature before it calls Deliver), or read a secret.
package trigger
