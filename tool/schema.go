package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// ErrInvalidArguments is wrapped by every argument validation error.
var ErrInvalidArguments = errors.New("invalid arguments")

// Validator checks tool arguments against a compiled JSON Schema.
type Validator struct {
	schema *jsonschema.Schema // nil: any JSON object
}

// NewValidator compiles schema (draft 2020-12 unless it says otherwise). A nil or empty schema
// accepts any JSON object. The error says what is wrong with the schema.
func NewValidator(name string, schema json.RawMessage) (*Validator, error) {
	if len(bytes.TrimSpace(schema)) == 0 {
		return &Validator{}, nil
	}
	sch, err := CompileSchema("reins:tool/"+name+".json", schema)
	if err != nil {
		return nil, fmt.Errorf("input_schema of tool %q %w", name, err)
	}
	return &Validator{schema: sch}, nil
}

// CompileSchema compiles a JSON Schema document (draft 2020-12 unless it says otherwise) under
// url. Its error completes a sentence whose subject is the schema: "is not valid JSON: …",
// "cannot be used: …" or "is not a valid JSON Schema: …".
func CompileSchema(url string, schema json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("is not valid JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("cannot be used: %w", err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("is not a valid JSON Schema: %s", firstLine(err.Error()))
	}
	return sch, nil
}

// Parse decodes args into the generic form the schema validator checks. Numbers become float64,
// which costs fewer allocations per call than [json.Number]; validation of integers beyond 2^53
// is therefore approximate, while the tool still receives the original bytes.
func Parse(args json.RawMessage) (any, error) {
	var v any
	if err := json.Unmarshal(args, &v); err != nil {
		return nil, fmt.Errorf("%w: not valid JSON: %v", ErrInvalidArguments, err)
	}
	return v, nil
}

// Validate checks parsed arguments (from Parse). The error is one sentence naming the first
// offending location.
func (v *Validator) Validate(parsed any) error {
	if _, ok := parsed.(map[string]any); !ok {
		return fmt.Errorf("%w: arguments must be a JSON object, got %s", ErrInvalidArguments, jsonKind(parsed))
	}
	if v.schema == nil {
		return nil
	}
	err := v.schema.Validate(parsed)
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidArguments, DescribeValidation(err))
}

var printer = message.NewPrinter(language.English)

// DescribeValidation renders the deepest first cause of a schema validation error as
// "at /path: message" (another error as its text).
func DescribeValidation(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	loc := "/" + strings.Join(ve.InstanceLocation, "/")
	return fmt.Sprintf("at %s: %s", loc, ve.ErrorKind.LocalizedString(printer))
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	default:
		return fmt.Sprintf("%T", v)
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[:i])
	}
	return s
}
