// Package protocoltest holds the JSON Schemas of the task and result protocol
// (docs/protocol/*.schema.json) against what the Go code sends: the tests of internal/wire and
// worker validate the messages they encode or capture with Validate, so that a schema that
// drifts from the code fails them. Tests only.
//
// It must not import any reins package, nor be imported by anything but tests.
package protocoltest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Base is the $id every schema of docs/protocol starts with; a schema's name is the rest
// ("task.schema.json").
const Base = "https://github.com/reins-run/reins/docs/protocol/"

// Dir is the directory of the schemas, found from this file's place in the module.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "docs", "protocol")
}

var (
	once     sync.Once
	compiled map[string]*jsonschema.Schema
	loadErr  error
)

// Schemas compiles every schema of Dir (draft 2020-12, formats asserted), by file name.
func Schemas() (map[string]*jsonschema.Schema, error) {
	once.Do(func() { compiled, loadErr = load(Dir()) })
	return compiled, loadErr
}

func load(dir string) (map[string]*jsonschema.Schema, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.schema.json"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no schema in %s (%v)", dir, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		name := filepath.Base(f)
		m, ok := doc.(map[string]any)
		if !ok || m["$id"] != Base+name {
			return nil, fmt.Errorf("%s: its $id must be %s%s", f, Base, name)
		}
		if m["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
			return nil, fmt.Errorf("%s: its $schema must be draft 2020-12's", f)
		}
		if err := c.AddResource(Base+name, doc); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	out := make(map[string]*jsonschema.Schema, len(names))
	for _, name := range names {
		s, err := c.Compile(Base + name)
		if err != nil {
			return nil, fmt.Errorf("compile %s: %w", name, err)
		}
		out[name] = s
	}
	return out, nil
}

// Check validates data, one JSON document, against the schema named name
// ("task.schema.json"), and returns why it does not conform.
func Check(name string, data []byte) error {
	schemas, err := Schemas()
	if err != nil {
		return err
	}
	s := schemas[name]
	if s == nil {
		return fmt.Errorf("no schema %s in %s", name, Dir())
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return s.Validate(doc)
}

// Validate fails t unless data conforms to the schema named name.
func Validate(t testing.TB, name string, data []byte) {
	t.Helper()
	if err := Check(name, data); err != nil {
		t.Errorf("%s does not conform to docs/protocol/%s: %v", clip(data), name, err)
	}
}

// Refuse fails t unless data does not conform to the schema named name.
func Refuse(t testing.TB, name string, data []byte) {
	t.Helper()
	if err := Check(name, data); err == nil {
		t.Errorf("%s conforms to docs/protocol/%s, which must refuse it", clip(data), name)
	} else if strings.HasPrefix(err.Error(), "no schema") {
		t.Error(err)
	}
}

func clip(data []byte) string {
	if len(data) > 400 {
		return string(data[:400]) + "…"
	}
	return string(data)
}
