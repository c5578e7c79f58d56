package natsbox

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// How much task traffic a keeper message covers before it is renewed. The file store writes
// into its last block until the block reaches its size (a few megabytes) and then starts a new
// one, which holds no keeper message. Until the keeper is renewed, an acknowledgement that
// leaves that new block empty makes the file store replace it with a new file: an iteration at
// half speed, and one more block file, on every acknowledgement. Renewing often bounds that
// stretch to a small share of a block; a renewal costs one publish and one purge.
const (
	keeperEveryTasks = 128
	keeperEveryBytes = 256 << 10
)

// Keeper keeps a keeper message (KeeperSubject) in the block REINS_TASKS writes into. The
// process that publishes tasks reports each one with Stored; every keeperEveryTasks tasks or
// keeperEveryBytes bytes it publishes a new keeper message and purges the older ones, so the
// stream holds one keeper, in a recent block. Safe for concurrent use.
type Keeper struct {
	nc    *nats.Conn
	names Names
	tasks jetstream.Stream

	count    atomic.Int64 // tasks since the last renewal
	bytes    atomic.Int64 // their bytes
	renewing atomic.Bool  // one renewal at a time: the others skip theirs
}

// NewKeeper returns the Keeper of tasks (the task stream of names) publishing on nc.
func NewKeeper(nc *nats.Conn, names Names, tasks jetstream.Stream) *Keeper {
	return &Keeper{nc: nc, names: names, tasks: tasks}
}

// Stored records a task of size bytes stored in REINS_TASKS and renews the keeper message when
// it is due, returning the renewal's error. A failed renewal is tried again at the next task.
func (k *Keeper) Stored(ctx context.Context, size int) error {
	n, b := k.count.Add(1), k.bytes.Add(int64(size))
	if n < keeperEveryTasks && b < keeperEveryBytes {
		return nil
	}
	if !k.renewing.CompareAndSwap(false, true) {
		return nil
	}
	defer k.renewing.Store(false)
	if err := k.Renew(ctx); err != nil {
		return err
	}
	k.count.Add(-n)
	k.bytes.Add(-b)
	return nil
}

// Renew publishes a new keeper message, which the file store writes into its current block,
// then purges the keeper messages before it.
func (k *Keeper) Renew(ctx context.Context) error {
	m := &nats.Msg{Subject: k.names.KeeperSubject(), Data: []byte(keeperText)}
	if _, err := Publish(ctx, k.nc, m); err != nil {
		return fmt.Errorf("natsbox: stream %s: renew the keeper message: %w", k.names.TasksStream(), err)
	}
	if err := k.tasks.Purge(ctx, jetstream.WithPurgeSubject(k.names.KeeperSubject()), jetstream.WithPurgeKeep(1)); err != nil {
		return fmt.Errorf("natsbox: stream %s: purge the older keeper messages: %w", k.names.TasksStream(), err)
	}
	return nil
}
