package template_test

import (
	"encoding/json"
	"testing"

	"github.com/reins-run/reins/template"
)

var benchScope = template.Scope{
	Input: json.RawMessage(`{"product": "Reins 1.0", "audience": "developers", "order": {"id": "A1", "total": 12.50, "lines": [{"sku": "x", "qty": 2}]}}`),
	Outputs: map[string]json.RawMessage{
		"generate": json.RawMessage(`"Reins 1.0 is out: agent loops you can audit."`),
		"evaluate": json.RawMessage(`{"verdict": "retry", "feedback": "Say what makes the loops bounded.", "score": 0.42}`),
	},
}

// BenchmarkRender renders a prompt with three paths: a key of the run input, a string output and
// a key of an object output.
func BenchmarkRender(b *testing.B) {
	const tmpl = "Announce {{ input.product }}. Previous draft: {{generate.output}}. Feedback: {{evaluate.output.feedback}}"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := template.Render(benchScope, tmpl); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPath(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := template.Path(benchScope, "input.order.lines.0.qty"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValue(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := template.Value(benchScope, "{{input.order}}"); err != nil {
			b.Fatal(err)
		}
	}
}
