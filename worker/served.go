package worker

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/reins-run/reins/internal/natsbox"
)

// What a worker serves, announced in natsbox.ServedBucket so that a client can tell at
// submission that a run needs a name no worker serves: its handlers, and the names Advertise
// adds (the tools and Go models package builtin serves).

// Kinds of served names (natsbox's).
const (
	ServedHandler = natsbox.ServedHandler
	ServedTool    = natsbox.ServedTool
	ServedModel   = natsbox.ServedModel
)

// servedName is what a KV key can hold of a name.
var servedName = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

// Advertise adds names of kind (ServedTool, ServedModel) to what the worker announces it
// serves. Like Handle, it is called before Run.
func (w *Worker) Advertise(kind string, names ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		panic(fmt.Sprintf("worker: Advertise(%q) after Run started", kind))
	}
	if w.advertised == nil {
		w.advertised = map[string][]string{}
	}
	w.advertised[kind] = append(w.advertised[kind], names...)
}

// servedKeys are the keys of what the worker serves.
func (w *Worker) servedKeys(handlers map[string]Handler) []string {
	var keys []string
	add := func(kind, name string) {
		if !servedName.MatchString(name) {
			w.log.Debug("worker: a name that a KV key cannot hold is not announced", "kind", kind, "name", name)
			return
		}
		keys = append(keys, kind+"."+name+"."+w.effects.id)
	}
	for name := range handlers {
		add(ServedHandler, name)
	}
	w.mu.Lock()
	for kind, names := range w.advertised {
		for _, n := range names {
			add(kind, n)
		}
	}
	w.mu.Unlock()
	slices.Sort(keys)
	return keys
}

// announce writes keys now and every natsbox.ServedEvery until stop is closed, then removes
// them. A failed write is logged: it costs a client's warning, nothing of a run.
func (w *Worker) announce(ctx context.Context, keys []string) (func(), error) {
	kv, err := w.js.KeyValue(ctx, w.names.ServedBucket())
	if err != nil {
		return nil, fmt.Errorf("worker: bucket %s: %w", w.names.ServedBucket(), err)
	}
	put := func(ctx context.Context) error {
		for _, k := range keys {
			if _, err := kv.Put(ctx, k, []byte(w.effects.id)); err != nil {
				return fmt.Errorf("worker: announce %s: %w", k, err)
			}
		}
		return nil
	}
	if err := put(ctx); err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	var done sync.WaitGroup
	done.Go(func() {
		t := time.NewTicker(natsbox.ServedEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if err := put(context.Background()); err != nil {
					w.log.Warn("worker: what it serves was not announced again", "err", err)
				}
			}
		}
	})
	return func() {
		close(stop)
		done.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		for _, k := range keys {
			_ = kv.Delete(ctx, k)
		}
	}, nil
}
