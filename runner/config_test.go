package runner

import (
	"testing"
	"time"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/operator"
)

// TestConfigZeroMeansDefault: a field of Config left at zero takes its default, as the same
// setting left out of a server's configuration does; a negative one turns it off.
// DefaultLimits are a server's default growth limits.
func TestConfigZeroMeansDefault(t *testing.T) {
	if DefaultMaxOutputBytes != operator.DefaultMaxBytes {
		t.Errorf("DefaultMaxOutputBytes is %d, a server's default max_output_bytes %d", DefaultMaxOutputBytes, operator.DefaultMaxBytes)
	}
	if g, l := operator.DefaultGrowth(), DefaultLimits(); l != (engine.Limits{MaxSteps: g.MaxSteps, MaxSignals: g.MaxSignalsPerRun, MaxEvents: g.MaxEventsPerRun}) {
		t.Errorf("DefaultLimits %+v differ from a server's default growth %+v", l, g)
	}
	v := runtest.New(t)
	for _, tc := range []struct {
		name       string
		cfg        Config
		saveWindow time.Duration
		maxOutput  int64 // 0: no bound
		maxValue   int64
		limits     engine.Limits // 0: no bound
	}{
		{"zero", Config{}, DefaultSaveWindow, DefaultMaxOutputBytes, wire.DefaultMaxValue, DefaultLimits()},
		{"off", Config{SaveWindow: -1, MaxOutputBytes: -1, Limits: engine.Limits{MaxSteps: -1, MaxSignals: -1, MaxEvents: -1}}, -1, 0, wire.DefaultMaxValue, engine.Limits{}},
		{"set", Config{SaveWindow: time.Second, MaxOutputBytes: 16, MaxValueBytes: 32, Limits: engine.Limits{MaxSteps: 1, MaxSignals: 2, MaxEvents: 3}}, time.Second, 16, 32, engine.Limits{MaxSteps: 1, MaxSignals: 2, MaxEvents: 3}},
		{"one limit off", Config{Limits: engine.Limits{MaxSignals: -1}}, DefaultSaveWindow, DefaultMaxOutputBytes, wire.DefaultMaxValue, engine.Limits{MaxSteps: operator.DefaultMaxSteps, MaxEvents: operator.DefaultMaxEventsPerRun}},
		{"output above the values' default", Config{MaxOutputBytes: 2 * wire.DefaultMaxValue}, DefaultSaveWindow, 2 * wire.DefaultMaxValue, 2 * wire.DefaultMaxValue, DefaultLimits()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Conn = (*conn.Conn)(v.Box)
			e, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if e.saveWindow != tc.saveWindow || e.maxOutput != tc.maxOutput || e.maxValue != tc.maxValue || e.limits != tc.limits {
				t.Errorf("save window %s, output bound %d, value bound %d, limits %+v; want %s, %d, %d, %+v", e.saveWindow, e.maxOutput, e.maxValue, e.limits, tc.saveWindow, tc.maxOutput, tc.maxValue, tc.limits)
			}
		})
	}
}
