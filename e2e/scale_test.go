//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/testkit/natstest"
)

// Sizes of BenchmarkEnginesScale: scaleRuns runs at once, each counting to scaleUntil.
const (
	scaleRuns  = 64
	scaleUntil = 200
)

// BenchmarkEnginesScale reports, on a three-node cluster at R3 with two workers, the iterations
// per second of 64 runs counting at once and the CPU each iteration cost the engines, the
// workers and the NATS servers, with 1, 2 and 3 engines; and, as their floor on the same
// cluster, raw JetStream publish→fetch→ack round trips by 64 loops at once. Run it with
// -benchtime 1x: each engine count is one measurement of 12,800 iterations.
//
//	go test -tags e2e ./e2e -run '^$' -bench EnginesScale -benchtime 1x
func BenchmarkEnginesScale(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	nc := newNATSCluster(b)
	nodes := nc.procs[:]
	floor, floorCPU := clusterFloor(b, ctx, nc.url, nodes)
	b.Logf("floor: %.0f round trips/s, NATS CPU %.0f µs each", floor, us(floorCPU))
	for _, engines := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("engines=%d", engines), func(b *testing.B) {
			for range b.N {
				c := &cluster{t: b, url: nc.url, state: b.TempDir()}
				f := watchFailover(b, ctx, c, engines, "--replicas", "3")
				workers := []*proc{loopWorker(b, nc.url, c.state, 0), loopWorker(b, nc.url, c.state, 0)}
				f.balanced()
				ids := f.startMore(fmt.Sprintf("scale%d-", engines), scaleRuns, scaleUntil)
				// Measured from when every run was started: the iterations saved since.
				before := 0
				for _, it := range f.at(ids) {
					before += it
				}
				cpu0 := [3]time.Duration{cpuOf(b, f.engines...), cpuOf(b, workers...), cpuOf(b, nodes...)}
				moves0 := leaseMoves(f.engines)
				t0 := time.Now()
				f.await("every run ends", func() bool {
					for _, id := range ids {
						if !f.ended[id] {
							return false
						}
					}
					return true
				})
				took := time.Since(t0)
				cpu := [3]time.Duration{cpuOf(b, f.engines...), cpuOf(b, workers...), cpuOf(b, nodes...)}
				n := float64(scaleRuns*scaleUntil - before)
				rate := n / took.Seconds()
				b.ReportMetric(rate, "iterations/s")
				b.ReportMetric(rate/floor, "ratio-to-floor")
				b.ReportMetric(us(cpu[0]-cpu0[0])/n, "engine-cpu-µs/iteration")
				b.ReportMetric(us(cpu[1]-cpu0[1])/n, "worker-cpu-µs/iteration")
				b.ReportMetric(us(cpu[2]-cpu0[2])/n, "nats-cpu-µs/iteration")
				b.ReportMetric(us(cpu[2]-cpu0[2])/n/us(floorCPU), "nats-cpu-ratio-to-floor")
				// Partitions that changed hands while the runs went on: none, with engines that keep
				// their leases.
				b.ReportMetric(float64(leaseMoves(f.engines)-moves0), "lease-moves")
			}
		})
	}
}

// leaseMoves counts the lines of the engines that say a partition changed hands.
func leaseMoves(engines []*proc) int {
	n := 0
	for _, e := range engines {
		for _, line := range e.output() {
			if strings.Contains(line, "taken over") || strings.Contains(line, "stops consuming") || strings.Contains(line, "another engine owns") {
				n++
			}
		}
	}
	return n
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

// clusterFloor measures raw JetStream on the cluster at url as 64 loops at once (as many as the
// runs of BenchmarkEnginesScale), each publishing to an R3 stream, fetching with a durable pull
// consumer of its own and acknowledging with a confirmed ack: round trips per second, and the
// CPU of the nodes per round trip.
func clusterFloor(b *testing.B, ctx context.Context, url string, nodes []*proc) (float64, time.Duration) {
	b.Helper()
	js := natstest.JetStream(b, url)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FLOOR", Subjects: []string{"floor.>"}, Storage: jetstream.FileStorage, Replicas: 3})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = js.DeleteStream(ctx, "FLOOR") }()
	cons := make([]jetstream.Consumer, scaleRuns)
	for i := range cons {
		if cons[i], err = stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable: "floor-" + strconv.Itoa(i), FilterSubject: "floor." + strconv.Itoa(i), AckPolicy: jetstream.AckExplicitPolicy, Replicas: 3,
		}); err != nil {
			b.Fatal(err)
		}
	}
	payload := []byte(`{"run":"bench","step":"loop","iteration":1}`)
	cpu0, t0 := cpuOf(b, nodes...), time.Now()
	errs := make(chan error, scaleRuns)
	var wg sync.WaitGroup
	for i, c := range cons {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range scaleUntil {
				if _, err := js.Publish(ctx, "floor."+strconv.Itoa(i), payload); err != nil {
					errs <- err
					return
				}
				batch, err := c.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
				if err != nil {
					errs <- err
					return
				}
				for m := range batch.Messages() {
					if err := m.DoubleAck(ctx); err != nil {
						errs <- err
						return
					}
				}
				if err := batch.Error(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	took, cpu := time.Since(t0), cpuOf(b, nodes...)-cpu0
	close(errs)
	for err := range errs {
		b.Fatalf("floor: %v", err)
	}
	n := float64(scaleRuns * scaleUntil)
	return n / took.Seconds(), time.Duration(float64(cpu) / n)
}

// cpuOf returns the CPU time (user and system) the processes used so far, from /proc: the
// clock ticks of their stat lines, at the 100 Hz Linux reports them in.
func cpuOf(b *testing.B, ps ...*proc) time.Duration {
	b.Helper()
	var total time.Duration
	for _, p := range ps {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
		if err != nil {
			b.Fatalf("CPU of %s: %v", p.name, err)
		}
		// The fields after the command name (which may hold spaces) start at the last ')'.
		fields := bytes.Fields(data[bytes.LastIndexByte(data, ')')+1:])
		if len(fields) < 13 {
			b.Fatalf("CPU of %s: a stat line of %d fields", p.name, len(fields))
		}
		for _, f := range fields[11:13] { // utime, stime
			ticks, err := strconv.ParseInt(string(f), 10, 64)
			if err != nil {
				b.Fatalf("CPU of %s: %v", p.name, err)
			}
			total += time.Duration(ticks) * 10 * time.Millisecond
		}
	}
	return total
}
