// Package ratelimit shares the rate limits of model providers among every worker of a
// deployment: per provider and per model, requests per minute (RPM), tokens per minute (TPM)
// and calls at once (MaxConcurrent), as the operator configures them (package operator), and
// the pauses providers ask for (a 429, or a Retry-After). A model call waits for capacity
// instead of failing, first come first served, bounded by its context.
//
// It owns the accounting rules, pure functions of a scope's State and the time (Acquire,
// Settle, Renew, Leave, Pause: rules.go, with the rules in Acquire's comment), and their shell
// over a JetStream KV bucket (natsbox's LimitsBucket; Limiter): one key per scope, read and
// written whole with compare-and-set on its revision, watched by each process so that its
// waiters wake when it changes, and the leases of the slots its calls hold renewed every third
// of a lease, so that a crashed worker's slot comes back when its lease ends. Limiter.Wrap puts
// it around a model.Model. It must not decide which limits apply (the operator's configuration
// does, and package builtin passes them), nor retry a call: a 429 is still the call's error,
// which the caller's retry policy handles; the next calls of every worker wait out the pause.
//
// # The rules
//
//   - RPM and TPM are token buckets (the generic cell rate algorithm): a bucket holds a
//     minute's worth and refills continuously at that rate, as OpenAI and Anthropic describe
//     their own limits. Over any span of d, at most RPM × (1 + d/1m) requests start.
//   - A call is charged its estimated tokens when it starts (model.EstimateInputTokens plus its
//     reply cap, Request.MaxOutputTokens, or DefaultReplyTokens without one; at most TPM) and
//     settled with its real usage when it ends (a failed call gives its tokens back; its request
//     stays counted).
//   - A slot of MaxConcurrent is held with a lease (Config.Lease, 30 s by default), renewed
//     every third of it while the call runs and freed when it ends. A slot whose lease ran out
//     goes to the next caller.
//   - Callers that cannot start take a place in the scope's queue, and what the places ahead
//     of a caller need (a request, their tokens, a slot each) is kept for them: a small call
//     does not overtake a large one that waits for tokens, and callers start in the order they
//     came as far as capacity frees. A place is kept for a third of the lease and refreshed
//     while its caller waits: a caller that died loses it then. A caller whose context ends
//     leaves the queue.
//   - A 429, or any retryable error with a Retry-After, pauses the model's scope until then (at
//     most MaxPause; 1 s for a 429 without Retry-After): every worker's calls of that model wait.
//   - A call goes through its provider's scope, then its model's, holding the first while it
//     waits for the second (always in that order, so that no two calls wait on each other).
//
// Time is the injected clock's (package clock): the workers of a deployment must have clocks
// in step (NTP), as the leases of side effects need too; a skew of s lets a bucket refill s
// early or a lease end s early.
package ratelimit
