package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// MaxDepth is how deeply the JSON values people send (run inputs, human input, signal data)
// may nest: arrays and objects within each other. Deeper values are refused where they enter
// (the CLI, client.Client), with one sentence; the engine's decoders would refuse them later.
const MaxDepth = 256

// ErrBadInput is what errors.Is finds in the errors of CheckJSON.
var ErrBadInput = errors.New("not an input reins accepts")

// inputError is an error of CheckJSON: a verb phrase ("is not JSON: ...") that the caller puts
// after the name of the value ("--input is not JSON: ...").
type inputError struct{ problem string }

func (e *inputError) Error() string        { return e.problem }
func (e *inputError) Is(target error) bool { return target == ErrBadInput }

func badInput(format string, args ...any) error {
	return &inputError{problem: fmt.Sprintf(format, args...)}
}

// CheckJSON tells whether data is one JSON value that reins accepts as a run input, human
// input or signal data: valid UTF-8, valid JSON (one value, nothing after it), nested at most
// MaxDepth deep, and at most maxBytes long (0: no bound). The error says what is wrong and at
// which byte as a verb phrase, for the caller to put after the value's name: "--input" + " " +
// "is not valid UTF-8 (byte 3)".
func CheckJSON(data []byte, maxBytes int) error {
	if maxBytes > 0 && len(data) > maxBytes {
		return badInput("is %d bytes, more than the %d bytes allowed", len(data), maxBytes)
	}
	if !utf8.Valid(data) {
		at := len(data)
		for i := 0; i < len(data); {
			r, n := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && n <= 1 {
				at = i
				break
			}
			i += n
		}
		return badInput("is not valid UTF-8 (byte %d)", at)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	depth := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return badInput("is not JSON: %v", err)
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			if depth++; depth > MaxDepth {
				return badInput("nests deeper than %d levels (byte %d)", MaxDepth, dec.InputOffset())
			}
		case json.Delim(']'), json.Delim('}'):
			depth--
		}
		if depth == 0 && dec.More() {
			return badInput("is not one JSON value: text follows it (byte %d)", dec.InputOffset())
		}
	}
	switch {
	case dec.InputOffset() == 0:
		return badInput("is empty")
	case depth != 0:
		return badInput("is not JSON: it ends inside an array or object (byte %d)", dec.InputOffset())
	}
	return nil
}
