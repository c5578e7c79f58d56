package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// Option adjusts the spec of a typed tool made with Func.
type Option func(*Spec)

// Writes marks a tool as side-effecting (write class): it changes the world, so it must honour
// the idempotency key in tool.InfoFrom(ctx).Key.
func Writes() Option { return func(s *Spec) { s.SideEffect = true } }

// RequiresApproval makes every call of the tool wait for a human decision.
func RequiresApproval() Option { return func(s *Spec) { s.NeedsApproval = true } }

// Func makes a tool of a typed Go function. The input schema is generated from In:
//
//   - each exported field is a property named by its json tag;
//   - a field without omitempty (or omitzero) is required;
//   - the `jsonschema:"..."` tag is the property's description;
//   - the `enum:"a,b,c"` tag restricts the property to those values;
//   - unknown properties are rejected.
//
// The loop validates the arguments against that schema before the call, then Func decodes them
// into In and encodes the result as JSON. The idempotency key is in tool.InfoFrom(ctx).Key.
// Func panics if In cannot be described by a JSON Schema (a channel, a func, a map with non-string
// keys): like regexp.MustCompile, it is meant for package-level tool declarations; [NewFunc] returns
// the error instead.
func Func[In, Out any](name, description string, fn func(context.Context, In) (Out, error), opts ...Option) Tool {
	t, err := NewFunc(name, description, fn, opts...)
	if err != nil {
		panic(err)
	}
	return t
}

// NewFunc is Func returning an error instead of panicking.
func NewFunc[In, Out any](name, description string, fn func(context.Context, In) (Out, error), opts ...Option) (Tool, error) {
	schema, err := SchemaFor[In]()
	if err != nil {
		return nil, fmt.Errorf("tool %q: %w", name, err)
	}
	spec := Spec{Name: name, Description: description, InputSchema: schema}
	for _, o := range opts {
		o(&spec)
	}
	if _, err := NewValidator(name, schema); err != nil {
		return nil, err
	}
	return typedTool[In, Out]{spec: spec, fn: fn}, nil
}

type typedTool[In, Out any] struct {
	spec Spec
	fn   func(context.Context, In) (Out, error)
}

func (t typedTool[In, Out]) Spec() Spec { return t.spec }

func (t typedTool[In, Out]) Call(ctx context.Context, args json.RawMessage, _ string) (json.RawMessage, error) {
	var in In
	if len(args) > 0 {
		if err := json.Unmarshal(args, &in); err != nil {
			return nil, &Error{Message: fmt.Sprintf("arguments of %s do not fit its input: %v", t.spec.Name, err), Retryable: true, Err: err}
		}
	}
	out, err := t.fn(ctx, in)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, &Error{Message: fmt.Sprintf("the result of %s cannot be encoded as JSON: %v", t.spec.Name, err), Err: err}
	}
	return b, nil
}

// SchemaFor generates the JSON Schema of T as Func describes it.
func SchemaFor[T any]() (json.RawMessage, error) {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		return nil, fmt.Errorf("cannot describe %s as a JSON Schema: %w", reflect.TypeFor[T](), err)
	}
	if s.Type != "object" {
		return nil, fmt.Errorf("the input of a tool must be a struct (a JSON object), not %s", reflect.TypeFor[T]())
	}
	if err := applyEnums(reflect.TypeFor[T](), s); err != nil {
		return nil, err
	}
	return json.Marshal(s)
}

// applyEnums adds the values of `enum` tags to the generated schema, following struct fields
// through pointers, slices and nested structs.
func applyEnums(t reflect.Type, s *jsonschema.Schema) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if s.Items != nil {
			return applyEnums(t.Elem(), s.Items)
		}
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			name, ok := jsonName(f)
			prop := s.Properties[name]
			if !ok || prop == nil {
				continue
			}
			if tag, ok := f.Tag.Lookup("enum"); ok {
				values, err := enumValues(f.Type, tag)
				if err != nil {
					return fmt.Errorf("field %s.%s: %w", t.Name(), f.Name, err)
				}
				prop.Enum = values
			}
			if err := applyEnums(f.Type, prop); err != nil {
				return err
			}
		}
	}
	return nil
}

func jsonName(f reflect.StructField) (string, bool) {
	if !f.IsExported() {
		return "", false
	}
	tag := f.Tag.Get("json")
	if tag == "-" {
		return "", false
	}
	if name, _, _ := strings.Cut(tag, ","); name != "" {
		return name, true
	}
	return f.Name, true
}

// enumValues parses a comma-separated enum tag into values of the field's JSON type.
func enumValues(t reflect.Type, tag string) ([]any, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var values []any
	for _, raw := range strings.Split(tag, ",") {
		raw = strings.TrimSpace(raw)
		switch t.Kind() {
		case reflect.String:
			values = append(values, raw)
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			n, err := strconv.ParseInt(raw, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("enum value %q is not an integer", raw)
			}
			values = append(values, n)
		case reflect.Float32, reflect.Float64:
			f, err := strconv.ParseFloat(raw, 64)
			if err != nil {
				return nil, fmt.Errorf("enum value %q is not a number", raw)
			}
			values = append(values, f)
		default:
			return nil, fmt.Errorf("enum tags apply to strings and numbers, not %s", t)
		}
	}
	return values, nil
}
