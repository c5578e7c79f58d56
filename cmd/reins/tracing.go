package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/reins-run/reins/telemetry"
)

// flushTimeout bounds the export of the spans still buffered when a command ends.
const flushTimeout = 5 * time.Second

// startTracing turns traces on when the OTEL_* environment names an OTLP endpoint (docs/
// observability.md), as service; the function it returns flushes them, to be deferred
// before the parts that emit spans start, so that it runs after they stopped.
func startTracing(ctx context.Context, service string, stderr io.Writer) (func(), error) {
	p, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: service})
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			fmt.Fprintln(stderr, "reins:", err)
		}
	}, nil
}
