package tool_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/reins-run/reins/tool"
)

// FuzzValidate feeds arbitrary schemas and arguments to the validator: it never panics; a schema
// either compiles or is rejected with an error naming the tool; arguments are either accepted
// (and then are a JSON object) or rejected with an error wrapping ErrInvalidArguments.
func FuzzValidate(f *testing.F) {
	f.Add([]byte(`{"type":"object","properties":{"order_id":{"type":"string","minLength":1}},"required":["order_id"]}`), []byte(`{"order_id":"O-1"}`))
	f.Add([]byte(`{"type":"object","additionalProperties":false}`), []byte(`{"x":1}`))
	f.Add([]byte(``), []byte(`[1,2]`))
	f.Add([]byte(`{"type":12}`), []byte(`{}`))
	f.Add([]byte(`{"enum":[1,"a",null]}`), []byte(`{bad`))
	f.Add([]byte(`{"$ref":"#/$defs/x","$defs":{"x":{"type":"object"}}}`), []byte(`{"a":{"b":[1.5e300]}}`))
	f.Fuzz(func(t *testing.T, schema, args []byte) {
		v, err := tool.NewValidator("fuzzed", schema)
		if err != nil {
			if v != nil {
				t.Fatal("a rejected schema returned a validator")
			}
			return
		}
		parsed, err := tool.Parse(args)
		if err == nil {
			err = v.Validate(parsed)
		}
		if err != nil {
			if !errors.Is(err, tool.ErrInvalidArguments) {
				t.Fatalf("argument error does not wrap ErrInvalidArguments: %v", err)
			}
			return
		}
		var obj map[string]any
		if json.Unmarshal(args, &obj) != nil || obj == nil {
			t.Fatalf("accepted arguments %q are not a JSON object", args)
		}
	})
}
