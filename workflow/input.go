package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/reins-run/reins/internal/suggest"
	"github.com/reins-run/reins/tool"
)

// ErrInput is wrapped by CheckInput's error: the run input does not match the workflow's
// input_schema.
var ErrInput = errors.New("the run input does not match the input_schema")

// inputSchema compiles the workflow's input_schema (nil when it has none). Its error completes
// a sentence whose subject is the schema (tool.CompileSchema).
func (d *Definition) inputSchema() (*jsonschema.Schema, error) {
	if len(bytes.TrimSpace(d.InputSchema)) == 0 {
		return nil, nil
	}
	return tool.CompileSchema("reins:workflow/"+d.Name+"/input_schema.json", d.InputSchema)
}

// CheckInput checks a run input against the workflow's input_schema, so that an input that
// would fail the run is refused before it starts: nil when the workflow has none. The error
// wraps [ErrInput] and names the first offending place of the input, as one sentence.
func (d *Definition) CheckInput(input json.RawMessage) error {
	sch, err := d.inputSchema()
	if err != nil {
		return fmt.Errorf("workflow %s: its input_schema %w", d.Name, err)
	}
	if sch == nil {
		return nil
	}
	if len(bytes.TrimSpace(input)) == 0 {
		input = json.RawMessage("null")
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(input))
	if err != nil {
		return fmt.Errorf("%w of workflow %s: the input is not JSON: %v", ErrInput, d.Name, err)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("%w of workflow %s: %s%s", ErrInput, d.Name, tool.DescribeValidation(err), d.misspelled(v))
	}
	return nil
}

// misspelled names a key of the input that the input_schema's top-level properties do not
// declare but one of them nearly spells: " (the input has orderid: did you mean order_id?)".
func (d *Definition) misspelled(input any) string {
	in, ok := input.(map[string]any)
	if !ok {
		return ""
	}
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(d.InputSchema, &schema) != nil || len(schema.Properties) == 0 {
		return ""
	}
	known := slices.Sorted(maps.Keys(schema.Properties))
	for _, k := range slices.Sorted(maps.Keys(in)) {
		if _, ok := schema.Properties[k]; ok {
			continue
		}
		if s := suggest.Closest(k, known); s != "" {
			return fmt.Sprintf(" (the input has %s: did you mean %s?)", k, s)
		}
	}
	return ""
}

// checkInputSchema reports an input_schema that is not a JSON Schema.
func (v *validator) checkInputSchema() {
	if _, err := v.d.inputSchema(); err != nil {
		v.add(EBadValue, "input_schema", "the input_schema %s", err)
	}
}
