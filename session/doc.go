// Package session owns the sessions of agent steps (docs/agents.md, Sessions): a conversation
// that an agent step with `session = "{{...}}"` continues across runs. It owns the record (the
// conversation as the context policy still sends it: the first message, the summary, the
// window; the turns saved, by run and step; when it was saved and when it expires), its key
// ([Scope.Key]: the principal who started the run, the workflow's name, the step and the
// rendered value, hashed), what a run's conversation makes of a session (Save: the whole view
// when nobody saved since the run began, else the run's turn appended to what the other run
// left; a turn saved once), and the store on KV natsbox.SessionsBucket (Store: a record over
// 256 KiB in chunks, written before the head that names them; every head write a
// compare-and-set on its revision).
//
// It must not decide what a step does (package builtin loads and saves at the step's start
// and end), run the loop, or name a bucket except through natsbox.Names.
package session
