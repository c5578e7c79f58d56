package runner

import (
	"testing"
	"time"

	"github.com/reins-run/reins/internal/runtest"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/operator"
)

// TestConfigZeroMeansDefault: a field of Config left at zero takes its default, as the same
// setting left out of a server's configuration does; a negative one turns it off.
func TestConfigZeroMeansDefault(t *testing.T) {
	if DefaultMaxOutputBytes != operator.DefaultMaxBytes {
		t.Errorf("DefaultMaxOutputBytes is %d, a server's default max_output_bytes %d", DefaultMaxOutputBytes, operator.DefaultMaxBytes)
	}
	v := runtest.New(t)
	for _, tc := range []struct {
		name       string
		cfg        Config
		saveWindow time.Duration
		maxOutput  int64 // 0: no bound
		maxValue   int64
	}{
		{"zero", Config{}, DefaultSaveWindow, DefaultMaxOutputBytes, wire.DefaultMaxValue},
		{"off", Config{SaveWindow: -1, MaxOutputBytes: -1}, -1, 0, wire.DefaultMaxValue},
		{"set", Config{SaveWindow: time.Second, MaxOutputBytes: 16, MaxValueBytes: 32}, time.Second, 16, 32},
		{"output above the values' default", Config{MaxOutputBytes: 2 * wire.DefaultMaxValue}, DefaultSaveWindow, 2 * wire.DefaultMaxValue, 2 * wire.DefaultMaxValue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Box = v.Box
			e, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if e.saveWindow != tc.saveWindow || e.maxOutput != tc.maxOutput || e.maxValue != tc.maxValue {
				t.Errorf("save window %s, output bound %d, value bound %d; want %s, %d, %d", e.saveWindow, e.maxOutput, e.maxValue, tc.saveWindow, tc.maxOutput, tc.maxValue)
			}
		})
	}
}
