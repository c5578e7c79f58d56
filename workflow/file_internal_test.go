package workflow

import (
	"sort"
	"testing"

	"github.com/reins-run/reins/internal/suggest"
)

// The step keys the loader decodes are exactly CommonKeys and every KeysOf.
func TestStepFieldsMatchTheContract(t *testing.T) {
	want := map[string]bool{}
	for _, k := range CommonKeys {
		want[k] = true
	}
	for _, keys := range KeysOf {
		for _, k := range keys {
			want[k] = true
		}
	}
	var missing, extra []string
	for k := range want {
		if stepFields[k] == nil {
			missing = append(missing, k)
		}
	}
	for k := range stepFields {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("stepFields lacks %v and has extra %v", missing, extra)
	}
	if len(KeysOf) != len(StepTypes) {
		t.Errorf("KeysOf has %d types, StepTypes %d", len(KeysOf), len(StepTypes))
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"handler", "model", "id", "max_iterations"}
	for name, want := range map[string]string{
		"handlr":        "handler",
		"hander":        "handler",
		"modle":         "model",
		"ix":            "id",
		"max_iteration": "max_iterations",
		"xyz":           "",
		"completely":    "",
	} {
		if got := suggest.Closest(name, known); got != want {
			t.Errorf("suggest.Closest(%q) = %q, want %q", name, got, want)
		}
	}
}
