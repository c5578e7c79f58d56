package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/reins-run/reins/clock"
)

// MockResult is one canned result of a mocked tool, in the eval fixture format: an output, or an
// error (retryable unless it says otherwise), either with an optional latency.
type MockResult struct {
	Output    json.RawMessage `json:"output,omitempty"`
	Error     *string         `json:"error,omitempty"`
	Retryable *bool           `json:"retryable,omitempty"`
	Latency   *clock.Duration `json:"latency,omitempty"`
}

// Validate reports what is wrong with a mock result, if anything.
func (r *MockResult) Validate() error {
	switch {
	case r.Output != nil && r.Error != nil:
		return errors.New("a mock result has either output or error, not both")
	case r.Output == nil && r.Error == nil:
		return errors.New("a mock result needs output or error")
	case r.Retryable != nil && r.Error == nil:
		return errors.New("retryable is only allowed with error")
	}
	return nil
}

// Mock is a tool that returns canned results: the n-th call of the run gets Results[n], and the
// last result repeats once the list is used up. With no results it returns null. The position
// comes from the call Info the loop puts in the context, so a run resumed from saved state picks
// up where it left off.
type Mock struct {
	spec    Spec
	results []MockResult
	clock   clock.Clock
}

// NewMock returns a mocked tool after checking every result.
func NewMock(spec Spec, results []MockResult, clk clock.Clock) (*Mock, error) {
	for i := range results {
		if err := results[i].Validate(); err != nil {
			return nil, fmt.Errorf("mocked_tools.%s[%d]: %w", spec.Name, i, err)
		}
	}
	if clk == nil {
		clk = clock.Real{}
	}
	return &Mock{spec: spec, results: results, clock: clk}, nil
}

// Spec returns the tool's spec.
func (m *Mock) Spec() Spec { return m.spec }

var nullOutput = json.RawMessage("null")

// Call returns the canned result for this call's position in the run.
func (m *Mock) Call(ctx context.Context, _ json.RawMessage, _ string) (json.RawMessage, error) {
	if len(m.results) == 0 {
		return nullOutput, nil
	}
	seq := 0
	if info := InfoFrom(ctx); info != nil {
		seq = info.Seq
	}
	r := &m.results[min(seq, len(m.results)-1)]
	if r.Latency != nil {
		if err := m.clock.Sleep(ctx, r.Latency.Std()); err != nil {
			return nil, err
		}
	}
	if r.Error != nil {
		return nil, &Error{Message: *r.Error, Retryable: r.Retryable == nil || *r.Retryable}
	}
	return r.Output, nil
}
