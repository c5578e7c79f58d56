package operator

import (
	"maps"
	"slices"
	"time"

	"github.com/reins-run/reins/workflow"
)

// Defaults of the tool timeouts ([limits] tool_timeout and max_tool_timeout). A minute is the
// MCP reference client's request timeout (and worker.DefaultEffectTimeout, which a worker
// started without a configuration uses).
const (
	DefaultToolTimeout    = time.Minute
	DefaultMaxToolTimeout = workflow.DefaultBoundToolTimeout
)

// toolTimeoutKeys are the keys of [limits] that bound the calls of tools.
var toolTimeoutKeys = []string{"tool_timeout", "max_tool_timeout"}

// toolTimeouts reads tool_timeout (how long a call of a tool that sets no timeout may take)
// and max_tool_timeout (the most a workflow's tool may ask for) of the [limits] table t at key.
func (l *loader) toolTimeouts(key string, t map[string]any, lim *Limits) {
	l.durations(key, t, map[string]*time.Duration{"tool_timeout": &lim.ToolTimeout, "max_tool_timeout": &lim.MaxToolTimeout}, `"5m"`)
	if lim.ToolTimeout > lim.MaxToolTimeout {
		l.add(key+".tool_timeout", "%s is more than max_tool_timeout (%s): the default of a tool's timeout must be within its cap", lim.ToolTimeout, lim.MaxToolTimeout)
	}
}

// maxDuration bounds every duration of [limits]: a day is longer than any call or request.
const maxDuration = 24 * time.Hour

// durations reads the duration keys of the table t at key into fields (by key), in the order
// of their names: each a string such as example, above 0 and at most maxDuration.
func (l *loader) durations(key string, t map[string]any, fields map[string]*time.Duration, example string) {
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		switch x := t[k].(type) {
		case nil:
		case string:
			d, err := time.ParseDuration(x)
			if err != nil || d <= 0 || d > maxDuration {
				l.add(key+"."+k, "want a duration of more than 0 and at most 24h, such as %s", example)
			} else {
				*fields[k] = d
			}
		default:
			l.add(key+"."+k, "want a duration: a string such as %s", example)
		}
	}
}
