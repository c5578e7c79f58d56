package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
	"github.com/reins-run/reins/internal/intern"
	"github.com/reins-run/reins/internal/jsonscan"
	"github.com/reins-run/reins/protocol"
)

// The decoding of tasks and events, on the path of every durable iteration. A worker decodes a
// task and the engine an event before anything else can happen, and reflection made each of
// them a twentieth of an iteration's latency. decodeTaskFast and decodeEventFast read the
// bodies EncodeTask and EncodeEvent over internal/jsonscan (the tokenizer of go-json-experiment,
// jsontext, before it): every member of a known name and of the expected kind is set directly, and a member of a
// nested type (usage, pending calls, decisions, parent) through the reflective decoder. Any
// other input (an unknown or differently cased name, a name with escapes, a null, a number that
// is not an integer, invalid UTF-8) makes them report false, and the caller decodes the whole body with
// the v1 decoder, so the result is always what encoding/json's semantics give
// (FuzzDecodeTaskFast and FuzzDecodeEventFast hold them to it).

// maxScanDepth bounds the nesting of a member's value the fast decoders follow; a deeper one
// goes to encoding/json, as any unusual input does.
const maxScanDepth = 64

// object calls member for each member of the object data holds, its value a slice of data
// whose syntax internal/jsonscan checked (its strings' UTF-8 included), and reports whether
// data was one object, with nothing but white space around it, whose members member took. A
// name with an escape is not taken.
func object(data []byte, member func(name []byte, v jsontext.Value) bool) bool {
	i := jsonscan.Space(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	if i = jsonscan.Space(data, i+1); i < len(data) && data[i] == '}' {
		return jsonscan.Space(data, i+1) == len(data)
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return false
		}
		end, escaped, ok := jsonscan.String(data, i, true)
		if !ok || escaped {
			return false
		}
		name := data[i+1 : end-1]
		if i = jsonscan.Space(data, end); i >= len(data) || data[i] != ':' {
			return false
		}
		i = jsonscan.Space(data, i+1)
		if end, ok = jsonscan.Value(data, i, maxScanDepth, true); !ok || !member(name, jsontext.Value(data[i:end])) {
			return false
		}
		if i = jsonscan.Space(data, end); i >= len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i = jsonscan.Space(data, i+1)
		case '}':
			return jsonscan.Space(data, i+1) == len(data)
		default:
			return false
		}
	}
}

// The values of members, each reporting false for a value of another kind. A string's UTF-8
// is not checked again: object scanned it with its UTF-8 checked.

func str(v jsontext.Value, s *string) bool {
	if v.Kind() != '"' {
		return false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		*s = string(v[1 : len(v)-1])
		return true
	}
	u, err := jsontext.AppendUnquote(nil, v)
	*s = string(u)
	return err == nil
}

// same is str for a value that comes again in every message of a run (its id, its steps,
// their handler, the workflow's hash, who started it, a type or a status): interned, they
// are not allocated each time (they were eight allocations of every iteration).
func same(v jsontext.Value, s *string) bool {
	if v.Kind() != '"' || bytes.IndexByte(v, '\\') >= 0 {
		return str(v, s)
	}
	*s = intern.Bytes(v[1 : len(v)-1]) // found without a lock when given lately
	return true
}

func integer(v jsontext.Value, n *int) bool {
	if v.Kind() != '0' {
		return false
	}
	i, err := strconv.Atoi(string(v))
	*n = i
	return err == nil
}

func boolean(v jsontext.Value, b *bool) bool {
	switch string(v) {
	case "true":
		*b = true
	case "false":
		*b = false
	default:
		return false
	}
	return true
}

func raw(v jsontext.Value, r *json.RawMessage) bool {
	*r = append((*r)[:0], v...) // encoding/json keeps a null as "null", and reuses the slice
	return true
}

func timestamp(v jsontext.Value, t *time.Time) bool {
	return v.Kind() == '"' && t.UnmarshalJSON(v) == nil
}

func nested(v jsontext.Value, p any) bool {
	return v.Kind() != 'n' && jsonv1.Unmarshal(v, p) == nil
}

func decodeTaskFast(data []byte, t *protocol.Task) bool {
	return object(data, func(name []byte, v jsontext.Value) bool {
		switch string(name) {
		case "run_id":
			return same(v, &t.RunID)
		case "step":
			return same(v, &t.Step)
		case "item":
			return integer(v, &t.Item)
		case "body":
			return same(v, &t.Body)
		case "type":
			return same(v, (*string)(&t.Type))
		case "handler":
			return same(v, &t.Handler)
		case "workflow":
			return same(v, &t.Workflow)
		case "model":
			return same(v, &t.Model)
		case "prompt":
			return str(v, &t.Prompt)
		case "instructions":
			return str(v, &t.Instructions)
		case "goal":
			return str(v, &t.Goal)
		case "session":
			return same(v, &t.Session)
		case "started_by":
			return same(v, &t.StartedBy)
		case "activation":
			return integer(v, &t.Activation)
		case "iteration":
			return integer(v, &t.Iteration)
		case "attempt":
			return integer(v, &t.Attempt)
		case "input":
			return raw(v, &t.Input)
		case "msg_id":
			return str(v, &t.MsgID)
		case "not_before":
			return timestamp(v, &t.NotBefore)
		case "timeout":
			var n int
			ok := integer(v, &n)
			t.Timeout = time.Duration(n)
			return ok
		case "resume":
			return integer(v, &t.Resume)
		case "decisions":
			return nested(v, &t.Decisions)
		case "human_input":
			return raw(v, &t.HumanInput)
		case "child_results":
			return nested(v, &t.ChildResults)
		case "protocol":
			return integer(v, &t.Protocol)
		}
		return false
	})
}

func decodeEventFast(data []byte, ev *protocol.Event) bool {
	return object(data, func(name []byte, v jsontext.Value) bool {
		switch string(name) {
		case "run_id":
			return same(v, &ev.RunID)
		case "type":
			return same(v, (*string)(&ev.Type))
		case "at":
			return timestamp(v, &ev.At)
		case "input":
			return raw(v, &ev.Input)
		case "step":
			return same(v, &ev.Step)
		case "item":
			return integer(v, &ev.Item)
		case "activation":
			return integer(v, &ev.Activation)
		case "iteration":
			return integer(v, &ev.Iteration)
		case "attempt":
			return integer(v, &ev.Attempt)
		case "output":
			return raw(v, &ev.Output)
		case "label":
			return str(v, &ev.Label)
		case "stop_reason":
			return str(v, &ev.StopReason)
		case "stop_detail":
			return str(v, &ev.StopDetail)
		case "error":
			return str(v, &ev.Error)
		case "usage":
			if ev.Usage == nil { // a second "usage" is merged into the first, as encoding/json does
				ev.Usage = new(protocol.Usage)
			}
			return nested(v, ev.Usage)
		case "permanent":
			return boolean(v, &ev.Permanent)
		case "record":
			if ev.Record == nil {
				ev.Record = new(protocol.Iteration)
			}
			return nested(v, ev.Record)
		case "reason":
			return str(v, &ev.Reason)
		case "status":
			return same(v, (*string)(&ev.Status))
		case "resume":
			return integer(v, &ev.Resume)
		case "pending":
			return nested(v, &ev.Pending)
		case "call_id":
			return str(v, &ev.CallID)
		case "approve":
			return boolean(v, &ev.Approve)
		case "message":
			return str(v, &ev.Message)
		case "by":
			return same(v, &ev.By)
		case "name":
			return same(v, &ev.Name)
		case "id":
			return str(v, &ev.ID)
		case "workflow":
			return same(v, &ev.Workflow)
		case "parent":
			if ev.Parent == nil {
				ev.Parent = new(protocol.Parent)
			}
			return nested(v, ev.Parent)
		case "registered":
			if ev.Registered == nil {
				ev.Registered = new(protocol.Registration)
			}
			return nested(v, ev.Registered)
		case "child":
			return str(v, &ev.Child)
		case "nonce":
			return str(v, &ev.Nonce)
		case "protocol":
			return integer(v, &ev.Protocol)
		}
		return false
	})
}
