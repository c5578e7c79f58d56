package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/reins-run/reins/internal/wire"
)

// The API reads JSON bodies strictly (docs/api.md, "Request bodies"): I-JSON (RFC 7493), so
// that a body means one thing to every reader of it. A member name appears once in an object,
// strings are valid UTF-8 with no lone surrogate escape, member names match the route's
// exactly (case included), no member the route does not take. A body that breaks these is not
// the JSON the route takes: 400, naming the member or the byte. One that is such JSON but
// nests deeper than wire.MaxDepth breaks a rule of reins's: 422, at the byte where it does.

// decodeBody decodes the JSON body of r into v (a pointer to a struct), strictly: at most
// Config.MaxInputBytes (413 beyond), one JSON object, no member v does not have (400 naming
// it, and the members the route takes). An empty body is an error unless optional; then v is
// left as it is.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	data, err := readBody(w, r, s.cfg.MaxInputBytes, "max_input_bytes")
	if err != nil {
		return err
	}
	return decodeJSON(r, data, v, optional)
}

// decodeJSON decodes data, the body of r already read, into v (a pointer to a struct) as
// decodeBody does: checkJSON, then one JSON object of v's members, each of v's type.
func decodeJSON(r *http.Request, data []byte, v any, optional bool) error {
	if len(bytes.TrimSpace(data)) == 0 {
		if optional {
			return nil
		}
		return problemf(http.StatusBadRequest, "%s %s needs a JSON object as its body, with the members %s", r.Method, r.URL.Path, members(v))
	}
	where := "the body of " + r.Method + " " + r.URL.Path
	if err := checkJSON(where, data, 1); err != nil {
		return err
	}
	if err := jsonv2.Unmarshal(data, v, jsonv2.RejectUnknownMembers(true), jsonv2.MatchCaseInsensitiveNames(false)); err != nil {
		return bodyProblem(where, v, err)
	}
	return nil
}

// checkJSON checks that data is one JSON value of I-JSON: 400 for a syntax error, invalid
// UTF-8 or a lone surrogate, a member name twice in an object, or text after the value, naming
// the byte (and where in the value); 422 for a value that nests deeper than wire.MaxDepth below
// the envelope levels that hold it (1 for a route's object whose members are values, 0 for a
// body that is a value itself, a delivery), found without reading further. where names the
// body in the sentence ("the body of POST /v1/runs").
func checkJSON(where string, data []byte, envelope int) error {
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	for {
		if _, err := dec.ReadToken(); err != nil {
			return syntaxProblem(where, err)
		}
		if depth := dec.StackDepth(); depth > wire.MaxDepth+envelope {
			return problemf(http.StatusUnprocessableEntity, "%s holds a value nested deeper than %d arrays and objects (at byte %d): reins takes no deeper JSON", where, wire.MaxDepth, dec.InputOffset()-1)
		} else if depth == 0 {
			break
		}
	}
	end := dec.InputOffset()
	switch _, err := dec.ReadToken(); {
	case err == io.EOF:
		return nil
	case err != nil:
		return syntaxProblem(where, err)
	}
	next := len(data) - len(bytes.TrimLeft(data[end:], " \t\r\n"))
	return problemf(http.StatusBadRequest, "%s holds more than one JSON value (the second at byte %d): want one", where, next)
}

// syntaxProblem is the 400 of a body that is not I-JSON, naming the byte and the member.
func syntaxProblem(where string, err error) *Problem {
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		if errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
			return problemf(http.StatusBadRequest, "%s is not JSON: it ends before its value does", where)
		}
		return problemf(http.StatusBadRequest, "%s is not JSON: %v", where, err)
	}
	in := ""
	if ptr := se.JSONPointer; ptr != "" && !errors.Is(se.Err, jsontext.ErrDuplicateName) {
		in = fmt.Sprintf(" in %q", string(ptr))
	}
	what := strings.TrimPrefix(se.Err.Error(), "jsontext: ")
	switch {
	case errors.Is(se.Err, jsontext.ErrDuplicateName):
		parent := ""
		if p := se.JSONPointer.Parent(); p != "" {
			parent = fmt.Sprintf(" of %q", string(p))
		}
		return problemf(http.StatusBadRequest, "%s has the member %q twice in the object%s (at byte %d): a member name may appear once in an object", where, se.JSONPointer.LastToken(), parent, se.ByteOffset)
	case errors.Is(se.Err, io.ErrUnexpectedEOF):
		return problemf(http.StatusBadRequest, "%s is not JSON: it ends%s before its value does (at byte %d)", where, in, se.ByteOffset)
	case strings.Contains(what, "UTF-8") || strings.Contains(what, "surrogate"):
		// What follows the bad bytes is not quoted back: it is the sender's text.
		what = "invalid UTF-8"
		if strings.Contains(se.Err.Error(), "surrogate") {
			what = "a lone surrogate (\\uD800-\\uDFFF without its pair)"
		}
		return problemf(http.StatusBadRequest, "%s holds %s%s (at byte %d): JSON text must be valid Unicode", where, what, in, se.ByteOffset)
	}
	if i := strings.Index(what, "`"); i > 0 { // jsontext quotes the text after the error: leave it out
		what = strings.TrimSpace(what[:i])
	}
	return problemf(http.StatusBadRequest, "%s is not JSON: %s%s (at byte %d)", where, what, in, se.ByteOffset)
}

// bodyProblem is the 400 of a body, I-JSON, that json could not decode into v: a member it
// does not take (case counts), or one of the wrong type, named.
func bodyProblem(where string, v any, err error) *Problem {
	var se *jsonv2.SemanticError
	if !errors.As(err, &se) {
		return problemf(http.StatusBadRequest, "%s: %s", where, strings.TrimPrefix(err.Error(), "json: "))
	}
	member := strings.TrimPrefix(string(se.JSONPointer), "/")
	switch {
	case errors.Is(se.Err, jsonv2.ErrUnknownName):
		name := se.JSONPointer.LastToken()
		if exact := sameFold(v, name); exact != "" {
			return problemf(http.StatusBadRequest, "%s: the member %q is not one of this route's, whose names match exactly, case included (it takes %q)", where, name, exact)
		}
		return problemf(http.StatusBadRequest, "%s: the member %q is not one of this route's (it takes %s)", where, name, members(v))
	case member == "":
		return problemf(http.StatusBadRequest, "%s is a JSON %s: want an object with the members %s", where, kindName(se.JSONKind), members(v))
	case se.GoType != nil:
		return problemf(http.StatusBadRequest, "%s: the member %q is a JSON %s: want %s", where, member, kindName(se.JSONKind), jsonKind(se.GoType))
	}
	return problemf(http.StatusBadRequest, "%s: the member %q cannot be read: %v", where, member, se.Err)
}

// kindName names a JSON kind as a sentence does.
func kindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "boolean"
	case '"':
		return "string"
	case '0':
		return "number"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return "value"
}

// sameFold returns the member of the struct v points to that name spells in another case;
// "" when none does.
func sameFold(v any, name string) string {
	for _, m := range memberNames(v) {
		if m != name && strings.EqualFold(m, name) {
			return m
		}
	}
	return ""
}

// memberNames lists the JSON members of the struct v points to.
func memberNames(v any) []string {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var names []string
	if t.Kind() == reflect.Struct {
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			if name != "" && name != "-" {
				names = append(names, name)
			}
		}
	}
	return names
}

// members lists the JSON members of the struct v points to, as a sentence lists them.
func members(v any) string {
	var names []string
	for _, n := range memberNames(v) {
		names = append(names, fmt.Sprintf("%q", n))
	}
	switch len(names) {
	case 0:
		return "none"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// jsonKind names the JSON value a Go type takes.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another JSON value"
}
