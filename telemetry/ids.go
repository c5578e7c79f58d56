package telemetry

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"strconv"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/reins-run/reins/internal/tracing"
)

// A durable run outlives the processes that serve it, so no process holds its span or its
// steps' spans open. Their ids are derived from what every process knows instead: the trace
// id from the run id, the run span's from the run id, a step span's from the run id, the
// step's key and its activation. The engine that decides an end emits the span then, with the
// start time from the run record; a worker parents its iteration's span on the step span named
// in the task's traceparent, and the engine parents a step's span on the run's.

// TraceID is the trace of run runID: the first 16 bytes of a SHA-256 of it.
func TraceID(runID string) trace.TraceID {
	var id trace.TraceID
	sum := derive("trace", runID)
	copy(id[:], sum[:])
	return id
}

// RunSpan is the span context of run runID's span.
func RunSpan(runID string) trace.SpanContext {
	return spanContext(TraceID(runID), spanID(derive("run", runID)))
}

// StepSpan is the span context of the span of activation activation of step key stepKey
// (protocol.StepKey: STEP, or PARENT#ITEM for a child of a parallel or map step) of run runID.
func StepSpan(runID, stepKey string, activation int) trace.SpanContext {
	return spanContext(TraceID(runID), spanID(derive("step", runID, stepKey, strconv.Itoa(activation))))
}

// derive hashes the parts, each preceded by its length so that no two lists of parts collide.
func derive(kind string, parts ...string) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte("reins/" + kind))
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

func spanID(sum [sha256.Size]byte) trace.SpanID {
	var id trace.SpanID
	copy(id[:], sum[:])
	return id
}

// spanContext is a remote span context with ids tid and sid, sampled as the process's sampler
// decides for trace tid: the same in every process.
func spanContext(tid trace.TraceID, sid trace.SpanID) trace.SpanContext {
	var flags trace.TraceFlags
	if t := tracing.Active(); t != nil && t.Sampled(tid) {
		flags = trace.FlagsSampled
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, Remote: true})
}

// idsKey carries the ids a span about to start must have (withIDs).
type idsKey struct{}

type wantIDs struct {
	trace trace.TraceID
	span  trace.SpanID
}

func withIDs(ctx context.Context, sc trace.SpanContext) context.Context {
	return context.WithValue(ctx, idsKey{}, wantIDs{sc.TraceID(), sc.SpanID()})
}

// idGenerator gives a span the ids its context asks for (withIDs), random ones otherwise.
type idGenerator struct{}

var _ sdktrace.IDGenerator = idGenerator{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if w, ok := ctx.Value(idsKey{}).(wantIDs); ok {
		return w.trace, w.span
	}
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.NativeEndian.PutUint64(tid[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, randomSpanID()
}

func (idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if w, ok := ctx.Value(idsKey{}).(wantIDs); ok {
		return w.span
	}
	return randomSpanID()
}

func randomSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}
