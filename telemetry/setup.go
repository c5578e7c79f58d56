package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/reins-run/reins/internal/tracing"
)

// ScopeName is the instrumentation scope of reins's spans.
const ScopeName = "github.com/reins-run/reins"

// CaptureContentEnv is the variable an operator sets to true to record prompts, completions
// and tool arguments and results in spans.
const CaptureContentEnv = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

// Config configures Setup.
type Config struct {
	// ServiceName is the service.name of the process's spans unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES names one ("reins" when empty).
	ServiceName string
}

// Enabled reports whether the process exports spans: callers do nothing for traces otherwise.
func Enabled() bool { return tracing.Enabled() }

// CaptureContent reports whether prompts, completions and tool payloads may be recorded.
func CaptureContent() bool {
	t := tracing.Active()
	return t != nil && t.Content
}

// Provider is the process's tracer provider as Setup made it.
type Provider struct{ tp *sdktrace.TracerProvider }

// Shutdown flushes the spans still buffered and stops the exporter; tracing is off after it.
// A nil Provider (tracing off) has nothing to do.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	tracing.Use(nil)
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("telemetry: flush the spans: %w", err)
	}
	return nil
}

// Setup turns tracing on when the environment configures an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or
// OTEL_TRACES_EXPORTER=otlp for the default localhost:4318), unless OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none. It returns nil (off, nothing to shut down) otherwise.
//
// It reads the process's environment, the exporter's OTEL_EXPORTER_OTLP_* variables too
// (headers, timeout, compression, TLS), and refuses a value it cannot use, naming it.
func Setup(ctx context.Context, cfg Config) (*Provider, error) {
	getenv := os.Getenv
	on, err := wanted(getenv)
	if err != nil || !on {
		return nil, err
	}
	ratio, err := ParseSampler(getenv("OTEL_TRACES_SAMPLER"), getenv("OTEL_TRACES_SAMPLER_ARG"))
	if err != nil {
		return nil, err
	}
	ocfg, err := readOTLPConfig(getenv)
	if err != nil {
		return nil, err
	}
	exp, err := otlptrace.New(ctx, newOTLPClient(ocfg))
	if err != nil {
		return nil, fmt.Errorf("telemetry: the OTLP exporter: %w", err)
	}
	res, err := serviceResource(ctx, cfg.ServiceName)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, err
	}
	// Every span of a run's trace is sampled on the trace id alone (derived from the run id),
	// so that the engine and the workers, which never share a sampling decision otherwise,
	// keep or drop the whole of a run's trace alike.
	sampler := sdktrace.TraceIDRatioBased(ratio)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sampler),
		sdktrace.WithIDGenerator(idGenerator{}),
	)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	tracing.Use(&tracing.On{Tracer: tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)), Sampled: sampledBy(sampler),
		Content: strings.EqualFold(strings.TrimSpace(getenv(CaptureContentEnv)), "true")})
	return &Provider{tp: tp}, nil
}

// sampledBy reports whether sampler keeps the spans of a trace, as it decides for a root span.
func sampledBy(sampler sdktrace.Sampler) func(trace.TraceID) bool {
	return func(tid trace.TraceID) bool {
		return sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: tid}).Decision == sdktrace.RecordAndSample
	}
}

// wanted reports whether the environment asks for traces.
func wanted(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, nil
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, nil
		}
	case "otlp":
	default:
		return false, fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER=%s: reins exports traces with otlp (or none)", exp)
	}
	// The traces' own protocol first, as the exporter reads them.
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(k)); p != "" {
			if p != "http/protobuf" {
				return false, fmt.Errorf("telemetry: %s=%s: reins exports traces with OTLP over HTTP only (http/protobuf)", k, p)
			}
			break
		}
	}
	return true, nil
}

// serviceResource describes the process: serviceName, unless the environment names another.
func serviceResource(ctx context.Context, serviceName string) (*resource.Resource, error) {
	if serviceName == "" {
		serviceName = "reins"
	}
	// Later detectors win: the environment's service.name over ours.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", serviceName)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: the resource: %w", err)
	}
	return res, nil
}

// ParseSampler returns the share of runs traced for OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG. The parent-based samplers mean the same as the others: every span
// of a reins trace decides on its trace id, which is its run's.
func ParseSampler(name, arg string) (float64, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	switch name {
	case "", "always_on", "parentbased_always_on":
		return 1, nil
	case "always_off", "parentbased_always_off":
		return 0, nil
	case "traceidratio", "parentbased_traceidratio":
	default:
		return 0, fmt.Errorf("telemetry: OTEL_TRACES_SAMPLER=%q is not a sampler reins knows (always_on, always_off, traceidratio and their parentbased_ forms)", name)
	}
	arg = strings.TrimSpace(arg)
	if arg == "" {
		return 1, nil
	}
	r, err := strconv.ParseFloat(arg, 64)
	if err != nil || !(r >= 0 && r <= 1) { // NaN fails both
		return 0, fmt.Errorf("telemetry: OTEL_TRACES_SAMPLER_ARG=%q is not a ratio between 0 and 1", arg)
	}
	return r, nil
}
