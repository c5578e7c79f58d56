package template_test

import (
	"encoding/json"
	"fmt"

	"github.com/reins-run/reins/template"
)

func Example() {
	scope := template.Scope{
		Input: json.RawMessage(`{"product": "Reins 1.0", "order": {"id": "A1", "total": 12.50}}`),
		Outputs: map[string]json.RawMessage{
			"evaluate": json.RawMessage(`{"verdict": "retry", "feedback": "Say what is bounded."}`),
		},
	}

	// A prompt: strings go in as they are, other values as compact JSON.
	prompt, err := template.Render(scope, "Announce {{input.product}} ({{ input.order }}). Feedback: {{evaluate.output.feedback}}")
	fmt.Println(prompt, err)

	// A step input that is one template: the value itself, an object stays an object.
	in, err := template.Value(scope, "{{input.order}}")
	fmt.Println(string(in), err)

	// A branch: the label is the value at a path into the step's output.
	v, _ := template.Relative(scope.Outputs["evaluate"], "verdict")
	label, err := template.Label(v)
	fmt.Println(label, err)

	// Nothing missing renders as an empty string: it is an error that says what is missing.
	_, err = template.Render(scope, "Review {{review.output.score}}")
	fmt.Println(err)
	_, err = template.Path(scope, "input.order.currency")
	fmt.Println(err)

	// Output:
	// Announce Reins 1.0 ({"id":"A1","total":12.50}). Feedback: Say what is bounded. <nil>
	// {"id": "A1", "total": 12.50} <nil>
	// retry <nil>
	// column 8: review.output.score: step review has no output yet
	// input.order.currency: input.order has no key "currency"
}

func ExampleItems() {
	scope := template.Scope{Input: json.RawMessage(`{"files": ["a.go", "b.go", "c.go"]}`)}
	items, err := template.Items(scope, "input.files", 10)
	fmt.Println(len(items), string(items[2]), err)
	_, err = template.Items(scope, "input.files", 2)
	fmt.Println(err)
	// Output:
	// 3 "c.go" <nil>
	// input.files: 3 items, more than the bound of 2
}
