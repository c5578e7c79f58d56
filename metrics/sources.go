package metrics

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// scrapeTimeout bounds what the sources read from NATS at one scrape.
const scrapeTimeout = 2 * time.Second

// EngineStats is what an engine counted since it started, read at each scrape (the engine
// counts in atomics it keeps anyway: its hot path pays nothing for metrics).
type EngineStats struct {
	// Decided counts the events that changed a run; Acked those acknowledged without change
	// (duplicates, stale answers); Held those held back (no record yet, ahead of the state);
	// Dropped those terminated; Refused those terminated because their sender may not send
	// them (a forged event); Reloads the decisions made again on reloaded state.
	Decided, Acked, Held, Dropped, Refused, Reloads int64
	// Saves counts the saves of run records; Conflicts the compare-and-set conflicts among them.
	Saves, Conflicts int64
	// Cached is how many runs are decoded in memory; Evicted counts those let go to stay
	// within the bound.
	Cached, Evicted int64
	// Partitions is how many of the event partitions the engine consumes now.
	Partitions int
}

// TaskQueue is what the task consumer of one handler holds, from its consumer info.
type TaskQueue struct {
	Handler string
	// Pending is the tasks not delivered yet; Unacknowledged those delivered and not settled
	// (running, or waiting for their loop_delay); Redelivered those among them delivered more
	// than once.
	Pending, Unacknowledged, Redelivered uint64
}

// sources is the collector of what is read at scrape time: the engines' counters, the runs
// waiting, and the task queues. Parts add their source when they start and remove it when they
// stop.
type sources struct {
	mu      sync.Mutex
	next    int
	engines map[int]func() EngineStats
	waiting map[int]func(context.Context) (map[string]int, error)
	queues  map[int]func(context.Context) ([]TaskQueue, error)

	events, reloads, saves, conflicts, evicted *prometheus.Desc
	cached, partitions, waitingRuns            *prometheus.Desc
	pending, unacked, redelivered              *prometheus.Desc
}

func newSources() *sources {
	d := prometheus.NewDesc
	return &sources{
		engines: map[int]func() EngineStats{},
		waiting: map[int]func(context.Context) (map[string]int, error){},
		queues:  map[int]func(context.Context) ([]TaskQueue, error){},

		events:      d("reins_engine_events_total", "Events the engine settled, by outcome: decided (the run changed), acked (nothing to change), held (not decidable yet), dropped (never decidable), refused (sent by whom may not send it).", []string{"outcome"}, nil),
		reloads:     d("reins_engine_reloads_total", "Decisions made again on a run state read back, the cached one being stale.", nil, nil),
		saves:       d("reins_engine_saves_total", "Saves of run records (compare-and-set).", nil, nil),
		conflicts:   d("reins_engine_save_conflicts_total", "Compare-and-set conflicts of saves: another writer saved the run first.", nil, nil),
		evicted:     d("reins_engine_evicted_runs_total", "Runs the engine's cache let go to stay within its bound.", nil, nil),
		cached:      d("reins_engine_cached_runs", "Runs decoded in the engine's cache.", nil, nil),
		partitions:  d("reins_engine_partitions_owned", "Event partitions this engine consumes (of 16 shared by all engines).", nil, nil),
		waitingRuns: d("reins_runs_waiting", "Runs waiting (for a human, a signal, a timer), by workflow, of the partitions this engine owns.", []string{"workflow"}, nil),
		pending:     d("reins_tasks_pending", "Tasks not delivered yet, by handler (the handler's consumer).", []string{"handler"}, nil),
		unacked:     d("reins_tasks_unacknowledged", "Tasks delivered and not settled (running, or waiting for their loop_delay), by handler.", []string{"handler"}, nil),
		redelivered: d("reins_tasks_redelivered", "Tasks delivered more than once and not settled yet, by handler.", []string{"handler"}, nil),
	}
}

// add keeps f in set under a new key and returns the function that removes it.
func add[F any](s *sources, set map[int]F, f F) (remove func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.next
	s.next++
	set[k] = f
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(set, k)
	}
}

// AddEngine reports an engine's counters at every scrape, until remove is called. Several
// engines of one process add up.
func (m *Metrics) AddEngine(stats func() EngineStats) (remove func()) {
	if m == nil {
		return func() {}
	}
	return add(m.sources, m.sources.engines, stats)
}

// AddWaitingRuns reports the runs waiting, by workflow, at every scrape, until remove is
// called: each engine counts those of the partitions it owns, so that the engines' counts add
// up to the deployment's.
func (m *Metrics) AddWaitingRuns(count func(context.Context) (map[string]int, error)) (remove func()) {
	if m == nil {
		return func() {}
	}
	return add(m.sources, m.sources.waiting, count)
}

// AddTaskQueues reports the task consumers of a worker's handlers at every scrape, until remove
// is called. Every worker serving a handler reports the same consumer: aggregate with max.
func (m *Metrics) AddTaskQueues(queues func(context.Context) ([]TaskQueue, error)) (remove func()) {
	if m == nil {
		return func() {}
	}
	return add(m.sources, m.sources.queues, queues)
}

func (s *sources) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.events, s.reloads, s.saves, s.conflicts, s.evicted, s.cached, s.partitions, s.waitingRuns, s.pending, s.unacked, s.redelivered} {
		ch <- d
	}
}

// Collect reads every source. A source that fails leaves its values out of this scrape.
func (s *sources) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	engines := slices.Collect(maps.Values(s.engines))
	waiting := slices.Collect(maps.Values(s.waiting))
	queues := slices.Collect(maps.Values(s.queues))
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	if len(engines) > 0 {
		s.collectEngines(ch, engines)
	}
	if len(waiting) > 0 {
		s.collectWaiting(ctx, ch, waiting)
	}
	if len(queues) > 0 {
		s.collectQueues(ctx, ch, queues)
	}
}

func (s *sources) collectEngines(ch chan<- prometheus.Metric, engines []func() EngineStats) {
	var t EngineStats
	for _, f := range engines {
		st := f()
		t.Decided += st.Decided
		t.Acked += st.Acked
		t.Held += st.Held
		t.Dropped += st.Dropped
		t.Refused += st.Refused
		t.Reloads += st.Reloads
		t.Saves += st.Saves
		t.Conflicts += st.Conflicts
		t.Cached += st.Cached
		t.Evicted += st.Evicted
		t.Partitions += st.Partitions
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(s.events, t.Decided, "decided")
	counter(s.events, t.Acked, "acked")
	counter(s.events, t.Held, "held")
	counter(s.events, t.Dropped, "dropped")
	counter(s.events, t.Refused, "refused")
	counter(s.reloads, t.Reloads)
	counter(s.saves, t.Saves)
	counter(s.conflicts, t.Conflicts)
	counter(s.evicted, t.Evicted)
	ch <- prometheus.MustNewConstMetric(s.cached, prometheus.GaugeValue, float64(t.Cached))
	ch <- prometheus.MustNewConstMetric(s.partitions, prometheus.GaugeValue, float64(t.Partitions))
}

func (s *sources) collectWaiting(ctx context.Context, ch chan<- prometheus.Metric, waiting []func(context.Context) (map[string]int, error)) {
	total := map[string]int{}
	for _, f := range waiting {
		byWorkflow, err := f(ctx)
		if err != nil {
			continue
		}
		for wf, n := range byWorkflow {
			total[wf] += n
		}
	}
	for wf, n := range total {
		ch <- prometheus.MustNewConstMetric(s.waitingRuns, prometheus.GaugeValue, float64(n), wf)
	}
}

// collectQueues reports each handler's consumer once, though several workers of the process
// serve it.
func (s *sources) collectQueues(ctx context.Context, ch chan<- prometheus.Metric, queues []func(context.Context) ([]TaskQueue, error)) {
	seen := map[string]bool{}
	for _, f := range queues {
		qs, err := f(ctx)
		if err != nil {
			continue
		}
		for _, q := range qs {
			if seen[q.Handler] {
				continue
			}
			seen[q.Handler] = true
			ch <- prometheus.MustNewConstMetric(s.pending, prometheus.GaugeValue, float64(q.Pending), q.Handler)
			ch <- prometheus.MustNewConstMetric(s.unacked, prometheus.GaugeValue, float64(q.Unacknowledged), q.Handler)
			ch <- prometheus.MustNewConstMetric(s.redelivered, prometheus.GaugeValue, float64(q.Redelivered), q.Handler)
		}
	}
}
