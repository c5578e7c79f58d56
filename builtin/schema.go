package builtin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/reins-run/reins/tool"
)

// schemaKey names a compiled output schema: the workflow's hash and the step.
type schemaKey struct{ workflow, step string }

// outputSchema is an llm step's output_schema, compiled.
type outputSchema struct {
	raw    json.RawMessage // compact, as the request shows it
	schema *jsonschema.Schema
}

// outputSchema returns the job's compiled output schema, or nil when the step has none.
func (h *Handlers) outputSchema(j *job) (*outputSchema, error) {
	if len(bytes.TrimSpace(j.step.OutputSchema)) == 0 {
		return nil, nil
	}
	key := schemaKey{j.task.Workflow, j.step.ID}
	h.mu.Lock()
	s := h.schemas[key]
	h.mu.Unlock()
	if s != nil {
		return s, nil
	}
	s, err := compileOutputSchema(j.step.OutputSchema)
	if err != nil {
		return nil, j.failf("output_schema %w", err)
	}
	h.mu.Lock()
	h.schemas[key] = s
	h.mu.Unlock()
	return s, nil
}

func compileOutputSchema(raw json.RawMessage) (*outputSchema, error) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, fmt.Errorf("is not valid JSON: %w", err)
	}
	sch, err := tool.CompileSchema("reins:output-schema.json", compact.Bytes())
	if err != nil {
		return nil, err
	}
	return &outputSchema{raw: compact.Bytes(), schema: sch}, nil
}

// check parses a reply as JSON and validates it. It returns the compact JSON, or the problem in
// words fit for the model and for an error.
func (s *outputSchema) check(reply string) (json.RawMessage, string) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(stripFence(reply))); err != nil {
		return nil, "the reply is not JSON (" + err.Error() + ")"
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(compact.Bytes()))
	if err != nil {
		return nil, "the reply is not JSON (" + err.Error() + ")"
	}
	if err := s.schema.Validate(doc); err != nil {
		return nil, "the reply does not match the output schema: " + tool.DescribeValidation(err)
	}
	return compact.Bytes(), ""
}

// stripFence trims a reply and removes one Markdown code fence around it (```json … ```), which
// models add to JSON replies even when asked not to.
func stripFence(reply string) string {
	s := strings.TrimSpace(reply)
	if !strings.HasPrefix(s, "```") || !strings.HasSuffix(s, "```") || len(s) < 6 {
		return s
	}
	body := strings.TrimSuffix(s[3:], "```")
	if nl := strings.IndexByte(body, '\n'); nl >= 0 && !strings.ContainsAny(body[:nl], "{[\"") {
		body = body[nl+1:] // the fence's language tag
	}
	return strings.TrimSpace(body)
}
