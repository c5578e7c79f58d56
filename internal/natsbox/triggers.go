package natsbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TriggersStream captures the messages of the subjects the operator allows subject triggers to
// listen on (package trigger): interest retention, so that a message is kept until the durable
// consumer of every trigger listening on its subject took it, through a restart of every
// engine, and not kept when no trigger listens. It exists only on a server whose operator
// allows subjects (EnsureTriggersStream); it is not part of the layout.
const TriggersStream = "REINS_TRIGGERS"

// TriggersMaxAge bounds how long a captured message waits for the triggers listening on it.
const TriggersMaxAge = 7 * 24 * time.Hour

// TriggerConsumerPrefix begins the name of each subject trigger's durable consumer.
const TriggerConsumerPrefix = "reins-trigger-"

// TriggersStream is the name of the stream of subject triggers in namespace n.
func (n Names) TriggersStream() string { return n.name + TriggersStream }

// EnsureTriggersStream creates or updates the stream of subject triggers to capture subjects
// (the operator's patterns, checked by the caller never to match reins's or the server's own),
// with the layout's replicas. A stream of another process over the same subjects makes the
// server refuse it, and the error says so.
func EnsureTriggersStream(ctx context.Context, js jetstream.JetStream, l Layout, subjects []string) error {
	if len(subjects) == 0 {
		return fmt.Errorf("natsbox: the stream of subject triggers needs at least one subject")
	}
	want := jetstream.StreamConfig{
		Name:        l.Names.TriggersStream(),
		Description: "reins: the messages of the subjects that subject triggers listen on, until each trigger took them",
		Subjects:    slices.Sorted(slices.Values(subjects)),
		Retention:   jetstream.InterestPolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  l.withDefaults().Duplicates,
		MaxAge:      TriggersMaxAge,
		Metadata:    metadata(),
	}
	r := &replicaReport{asked: l.Replicas}
	if err := layoutStep(ctx, js, "stream "+want.Name, func(ctx context.Context) error { return ensureStream(ctx, js, want, r) }); err != nil {
		if errors.Is(err, ErrPermission) {
			return err
		}
		return fmt.Errorf("%w (the subjects of [triggers] subjects may overlap another stream's)", err)
	}
	r.log(l.Logger)
	return nil
}
