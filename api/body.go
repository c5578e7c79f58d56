package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
)

// decodeBody decodes the JSON body of r into v (a pointer to a struct), strictly: at most
// Config.MaxInputBytes (413 beyond), one JSON object, no member v does not have (400 naming
// it, and the members the route takes). An empty body is an error unless optional; then v is
// left as it is.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxInputBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return problemf(http.StatusRequestEntityTooLarge, "the body of %s %s is larger than the limit of %d bytes", r.Method, r.URL.Path, tooLarge.Limit)
		}
		return problemf(http.StatusBadRequest, "the body of %s %s could not be read: %v", r.Method, r.URL.Path, err)
	}
	return decodeJSON(r, data, v, optional)
}

// decodeJSON decodes data, the body of r already read, into v (a pointer to a struct) as
// decodeBody does: one JSON object, no member v does not have.
func decodeJSON(r *http.Request, data []byte, v any, optional bool) error {
	if len(bytes.TrimSpace(data)) == 0 {
		if optional {
			return nil
		}
		return problemf(http.StatusBadRequest, "%s %s needs a JSON object as its body, with the members %s", r.Method, r.URL.Path, members(v))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyProblem(r, v, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return problemf(http.StatusBadRequest, "the body of %s %s holds more than one JSON value: want one object", r.Method, r.URL.Path)
	}
	return nil
}

// bodyProblem is the 400 of a body that json could not decode into v, naming the member.
func bodyProblem(r *http.Request, v any, err error) *Problem {
	where := "the body of " + r.Method + " " + r.URL.Path
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field == "":
		return problemf(http.StatusBadRequest, "%s is a JSON %s: want an object with the members %s", where, typeErr.Value, members(v))
	case errors.As(err, &typeErr):
		return problemf(http.StatusBadRequest, "%s: the member %s is a JSON %s: want %s", where, typeErr.Field, typeErr.Value, jsonKind(typeErr.Type))
	case errors.As(err, &syntaxErr):
		return problemf(http.StatusBadRequest, "%s is not JSON: %s (at byte %d)", where, strings.TrimPrefix(syntaxErr.Error(), "json: "), syntaxErr.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return problemf(http.StatusBadRequest, "%s is not JSON: it ends before its value does", where)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return problemf(http.StatusBadRequest, "%s: the member %s is not one of this route's (it takes %s)", where, name, members(v))
	}
	return problemf(http.StatusBadRequest, "%s: %s", where, strings.TrimPrefix(err.Error(), "json: "))
}

// members lists the JSON members of the struct v points to, as a sentence lists them.
func members(v any) string {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var names []string
	if t.Kind() == reflect.Struct {
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			if name != "" && name != "-" {
				names = append(names, fmt.Sprintf("%q", name))
			}
		}
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
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another JSON value"
}
