package eval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/tool"
)

// ParseScript decodes the turns of a scripted model, written as a fixture's `model` list (a
// workflow's scripted model has them in `script`), with the fixture's strictness: unknown keys,
// wrong types, bad durations and invalid turns are errors. key names the list in errors, which
// read "KEY[2].text: expected string, got number".
func ParseScript(key string, script json.RawMessage) ([]model.Turn, error) {
	var turns []model.Turn
	if err := decodeChecked(key, script, scriptSchema, &turns); err != nil {
		return nil, err
	}
	for i := range turns {
		if err := turns[i].Validate(); err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", key, i, err)
		}
	}
	return turns, nil
}

// ScriptedModel returns the scripted model of a script (see ParseScript), on clk (nil: the real
// clock): it replays the turns by Request.Seq, as a fixture's model does.
func ScriptedModel(key string, script json.RawMessage, clk clock.Clock) (*model.Scripted, error) {
	turns, err := ParseScript(key, script)
	if err != nil {
		return nil, err
	}
	s, err := model.NewScripted(turns, clk)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return s, nil
}

// ParseMocks decodes a mocked tool's results, written as an entry of a fixture's `mocked_tools`
// (a workflow tool has them in `mock`), with the fixture's strictness. An empty value means no
// results (every call returns null). key names the list in errors.
func ParseMocks(key string, mock json.RawMessage) ([]tool.MockResult, error) {
	if len(bytes.TrimSpace(mock)) == 0 {
		return nil, nil
	}
	var results []tool.MockResult
	if err := decodeChecked(key, mock, mockSchema, &results); err != nil {
		return nil, err
	}
	for i := range results {
		if err := results[i].Validate(); err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", key, i, err)
		}
	}
	return results, nil
}

// MockedTool returns the mocked tool with spec and the results of mock (see ParseMocks), on clk
// (nil: the real clock): the n-th call of a run gets the n-th result, by tool.Info.Seq, as a
// fixture's mocked tool does.
func MockedTool(key string, spec tool.Spec, mock json.RawMessage, clk clock.Clock) (*tool.Mock, error) {
	results, err := ParseMocks(key, mock)
	if err != nil {
		return nil, err
	}
	m, err := tool.NewMock(spec, results, clk)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return m, nil
}

// decodeChecked validates data against sch, then decodes it into v; errors name the key.
func decodeChecked(key string, data json.RawMessage, sch *jsonschema.Schema, v any) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s: not valid JSON: %s", key, jsonErrorAt(data, err))
	}
	if err := sch.Validate(doc); err != nil {
		var ve *jsonschema.ValidationError
		var ie *InvalidError
		if errors.As(err, &ve) && errors.As(schemaError("", ve), &ie) {
			return fmt.Errorf("%s: %s", joinIndexKey(key, ie.Key), ie.Msg)
		}
		return fmt.Errorf("%s: %w", key, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// joinIndexKey appends a key relative to a list ("[2].text", or "(top level)" for the list
// itself) to the list's key.
func joinIndexKey(key, rel string) string {
	switch {
	case rel == "(top level)" || rel == "":
		return key
	case rel[0] == '[':
		return key + rel
	}
	return key + "." + rel
}
