package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/clock"
	"github.com/reins-run/reins/tool"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// validate parses and validates args the way the loop does.
func validate(v *tool.Validator, args string) error {
	parsed, err := tool.Parse(json.RawMessage(args))
	if err != nil {
		return err
	}
	return v.Validate(parsed)
}

func TestValidatorWithoutSchema(t *testing.T) {
	for _, schema := range []string{"", "  \n"} {
		v, err := tool.NewValidator("any", json.RawMessage(schema))
		if err != nil {
			t.Fatalf("NewValidator(%q): %v", schema, err)
		}
		for _, tc := range []struct {
			args    string
			wantErr string
		}{
			{`{}`, ""},
			{`{"a": [1, 2], "b": {"c": null}}`, ""},
			{`[]`, "got an array"},
			{`[{"a": 1}]`, "got an array"},
			{`"text"`, "got a string"},
			{`null`, "got null"},
			{`42`, "got a number"},
			{`true`, "got a boolean"},
		} {
			err := validate(v, tc.args)
			if tc.wantErr == "" {
				if err != nil {
					t.Errorf("schema %q, args %s: %v, want nil", schema, tc.args, err)
				}
				continue
			}
			if !errors.Is(err, tool.ErrInvalidArguments) || !strings.Contains(err.Error(), "must be a JSON object") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("schema %q, args %s: %v, want ErrInvalidArguments saying it must be a JSON object, %s", schema, tc.args, err, tc.wantErr)
			}
		}
	}
	// A nil schema behaves the same.
	v, err := tool.NewValidator("any", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(v, `{"x": 1}`); err != nil {
		t.Errorf("nil schema rejected an object: %v", err)
	}
	if err := validate(v, `[1]`); !errors.Is(err, tool.ErrInvalidArguments) {
		t.Errorf("nil schema accepted an array: %v", err)
	}
}

const orderSchema = `{
	"type": "object",
	"properties": {
		"order_id": {"type": "string", "minLength": 1},
		"mode": {"enum": ["fast", "slow"]},
		"count": {"type": "integer", "minimum": 1}
	},
	"required": ["order_id"],
	"additionalProperties": false
}`

func TestValidatorWithSchema(t *testing.T) {
	v, err := tool.NewValidator("read_order", json.RawMessage(orderSchema))
	if err != nil {
		t.Fatalf("NewValidator: %v", err)
	}
	for _, tc := range []struct {
		name string
		args string
		want []string // substrings of the error; nil means valid
	}{
		{"valid", `{"order_id": "O-1"}`, nil},
		{"valid with all keys", `{"order_id": "O-1", "mode": "slow", "count": 3}`, nil},
		{"missing required", `{}`, []string{"at /:", "order_id"}},
		{"minLength", `{"order_id": ""}`, []string{"at /order_id:"}},
		{"wrong type", `{"order_id": 104}`, []string{"at /order_id:", "string"}},
		{"additional property", `{"order_id": "O-1", "extra": true}`, []string{"at /:", "extra"}},
		{"enum", `{"order_id": "O-1", "mode": "medium"}`, []string{"at /mode:"}},
		{"minimum", `{"order_id": "O-1", "count": 0}`, []string{"at /count:"}},
		{"integer", `{"order_id": "O-1", "count": 1.5}`, []string{"at /count:"}},
		{"not an object", `["O-1"]`, []string{"must be a JSON object", "an array"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validate(v, tc.args)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate(%s) = %v, want nil", tc.args, err)
				}
				return
			}
			if !errors.Is(err, tool.ErrInvalidArguments) {
				t.Fatalf("Validate(%s) = %v, want an error wrapping ErrInvalidArguments", tc.args, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate(%s) = %q, want it to contain %q", tc.args, err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("Validate(%s) = %q, want one line", tc.args, err)
			}
		})
	}
}

func TestValidatorNestedLocation(t *testing.T) {
	v, err := tool.NewValidator("t", json.RawMessage(`{
		"type": "object",
		"properties": {"items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}}}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	err = validate(v, `{"items": [{"sku": "a"}, {"sku": 7}]}`)
	if !errors.Is(err, tool.ErrInvalidArguments) || !strings.Contains(err.Error(), "at /items/1/sku:") {
		t.Fatalf("Validate = %v, want ErrInvalidArguments at /items/1/sku", err)
	}
}

func TestParseRejectsInvalidJSON(t *testing.T) {
	for _, args := range []string{``, `{`, `{"a": }`, `{} {}`} {
		if _, err := tool.Parse(json.RawMessage(args)); !errors.Is(err, tool.ErrInvalidArguments) || !strings.Contains(err.Error(), "not valid JSON") {
			t.Errorf("Parse(%q) = %v, want ErrInvalidArguments: not valid JSON", args, err)
		}
	}
}

func TestNewValidatorBadSchema(t *testing.T) {
	for _, tc := range []struct {
		name   string
		schema string
		want   string
	}{
		{"invalid JSON", `{"type": "object"`, "is not valid JSON"},
		{"invalid JSON trailing", `{"type": "object"} x`, "is not valid JSON"},
		{"type is a number", `{"type": 12}`, "is not a valid JSON Schema"},
		{"unknown type name", `{"type": "thing"}`, "is not a valid JSON Schema"},
		{"required not an array", `{"required": "order_id"}`, "is not a valid JSON Schema"},
		{"minLength negative", `{"properties": {"a": {"minLength": -1}}}`, "is not a valid JSON Schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := tool.NewValidator("read_order", json.RawMessage(tc.schema))
			if err == nil {
				t.Fatalf("NewValidator(%s) = %v, nil; want an error", tc.schema, v)
			}
			msg := err.Error()
			if !strings.Contains(msg, `tool "read_order"`) || !strings.Contains(msg, tc.want) {
				t.Fatalf("NewValidator(%s) error %q, want it to name tool \"read_order\" and say %q", tc.schema, msg, tc.want)
			}
			if strings.Contains(msg, "\n") {
				t.Fatalf("error %q spans several lines", msg)
			}
		})
	}
}

func TestBooleanSchemas(t *testing.T) {
	for _, tc := range []struct {
		schema string
		ok     bool
	}{{"true", true}, {"false", false}} {
		v, err := tool.NewValidator("b", json.RawMessage(tc.schema))
		if err != nil {
			t.Fatalf("NewValidator(%s): %v", tc.schema, err)
		}
		if err := validate(v, `{"a": 1}`); (err == nil) != tc.ok {
			t.Errorf("schema %s: Validate = %v, want ok=%v", tc.schema, err, tc.ok)
		}
	}
}

// mockResults decodes results in the fixture format.
func mockResults(t *testing.T, s string) []tool.MockResult {
	t.Helper()
	var rs []tool.MockResult
	if err := json.Unmarshal([]byte(s), &rs); err != nil {
		t.Fatalf("decoding mock results: %v", err)
	}
	return rs
}

// callAt calls the mock as the seq-th call of its tool in the run.
func callAt(m tool.Tool, seq int) (json.RawMessage, error) {
	ctx := tool.WithInfo(context.Background(), &tool.Info{RunID: "r", Iteration: 1, Seq: seq})
	return m.Call(ctx, json.RawMessage(`{}`), "r/1/0")
}

func TestMockResultsBySeq(t *testing.T) {
	v := clock.NewVirtual(epoch)
	spec := tool.Spec{Name: "read_order", SideEffect: true}
	m, err := tool.NewMock(spec, mockResults(t, `[
		{"output": {"n": 0}},
		{"error": "flaky"},
		{"error": "gone", "retryable": false},
		{"error": "later", "retryable": true},
		{"output": "last", "latency": "3s"}
	]`), v)
	if err != nil {
		t.Fatalf("NewMock: %v", err)
	}
	if got := m.Spec(); got.Name != spec.Name || !got.SideEffect {
		t.Errorf("Spec() = %+v, want %+v", got, spec)
	}
	for _, tc := range []struct {
		seq       int
		out       string
		errMsg    string
		retryable bool
	}{
		{seq: 0, out: `{"n": 0}`},
		{seq: 1, errMsg: "flaky", retryable: true},
		{seq: 2, errMsg: "gone", retryable: false},
		{seq: 3, errMsg: "later", retryable: true},
		{seq: 4, out: `"last"`},
		{seq: 5, out: `"last"`}, // the last result repeats
		{seq: 100, out: `"last"`},
		{seq: 0, out: `{"n": 0}`}, // stateless: the position comes from the context
	} {
		out, err := callAt(m, tc.seq)
		if tc.errMsg == "" {
			if err != nil || string(out) != tc.out {
				t.Errorf("seq %d: %s, %v; want %s", tc.seq, out, err, tc.out)
			}
			continue
		}
		var te *tool.Error
		if !errors.As(err, &te) || te.Message != tc.errMsg || te.Retryable != tc.retryable || out != nil {
			t.Errorf("seq %d: %s, %#v; want *tool.Error %q retryable %v", tc.seq, out, err, tc.errMsg, tc.retryable)
		}
		if tool.IsRetryable(err) != tc.retryable {
			t.Errorf("seq %d: IsRetryable = %v, want %v", tc.seq, !tc.retryable, tc.retryable)
		}
	}
	// Only the result with a latency spent time: seq 4, 5 and 100 took 3s each.
	if got, want := v.Now().Sub(epoch), 9*time.Second; got != want {
		t.Errorf("virtual clock moved %v, want %v", got, want)
	}
}

func TestMockWithoutInfoIsFirstCall(t *testing.T) {
	m, err := tool.NewMock(tool.Spec{Name: "t"}, mockResults(t, `[{"output": 1}, {"output": 2}]`), nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Call(context.Background(), nil, "")
	if err != nil || string(out) != "1" {
		t.Fatalf("Call outside a loop = %s, %v; want the first result", out, err)
	}
}

func TestMockWithoutResultsReturnsNull(t *testing.T) {
	for _, results := range [][]tool.MockResult{nil, {}} {
		m, err := tool.NewMock(tool.Spec{Name: "t"}, results, clock.NewVirtual(epoch))
		if err != nil {
			t.Fatal(err)
		}
		for seq := range 3 {
			out, err := callAt(m, seq)
			if err != nil || string(out) != "null" {
				t.Errorf("seq %d: %s, %v; want null", seq, out, err)
			}
		}
	}
}

func TestMockExplicitNullOutput(t *testing.T) {
	m, err := tool.NewMock(tool.Spec{Name: "t"}, mockResults(t, `[{"output": null}]`), nil)
	if err != nil {
		t.Fatalf("NewMock rejected an explicit null output: %v", err)
	}
	if out, err := callAt(m, 0); err != nil || string(out) != "null" {
		t.Fatalf("Call = %s, %v; want null", out, err)
	}
}

func TestMockLatencyCancelled(t *testing.T) {
	v := clock.NewVirtual(epoch)
	m, err := tool.NewMock(tool.Spec{Name: "t"}, mockResults(t, `[{"output": 1, "latency": "1s"}]`), v)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if out, err := m.Call(ctx, nil, ""); !errors.Is(err, context.Canceled) || out != nil {
		t.Fatalf("Call on a cancelled context = %s, %v; want context.Canceled", out, err)
	}
	if !v.Now().Equal(epoch) {
		t.Fatalf("a cancelled call moved the clock to %v", v.Now())
	}
}

func TestNewMockRejectsBadResults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		results string
		want    string
	}{
		{"output and error", `[{"output": 1}, {"output": 1, "error": "x"}]`, "mocked_tools.read_order[1]: a mock result has either output or error, not both"},
		{"neither", `[{"latency": "1s"}]`, "mocked_tools.read_order[0]: a mock result needs output or error"},
		{"retryable without error", `[{"output": 1, "retryable": false}]`, "mocked_tools.read_order[0]: retryable is only allowed with error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := tool.NewMock(tool.Spec{Name: "read_order"}, mockResults(t, tc.results), nil)
			if err == nil {
				t.Fatalf("NewMock = %v, nil; want an error", m)
			}
			if err.Error() != tc.want {
				t.Fatalf("NewMock error %q, want %q", err, tc.want)
			}
		})
	}
}

func TestSafeCall(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fn        func(context.Context, json.RawMessage, string) (json.RawMessage, error)
		out       string
		errSub    string
		retryable bool
	}{
		{
			name: "passes through output and key",
			fn: func(_ context.Context, args json.RawMessage, key string) (json.RawMessage, error) {
				return json.RawMessage(fmt.Sprintf(`{"args": %s, "key": %q}`, args, key)), nil
			},
			out: `{"args": {"a":1}, "key": "k1"}`,
		},
		{
			name: "passes through errors",
			fn: func(context.Context, json.RawMessage, string) (json.RawMessage, error) {
				return nil, &tool.Error{Message: "nope", Retryable: true}
			},
			errSub: "nope", retryable: true,
		},
		{
			name:   "panic with a string",
			fn:     func(context.Context, json.RawMessage, string) (json.RawMessage, error) { panic("kaboom") },
			errSub: "tool broken panicked: kaboom",
		},
		{
			name: "panic with an error",
			fn: func(context.Context, json.RawMessage, string) (json.RawMessage, error) {
				var m map[string]int
				//lint:ignore SA5000 the panic is what this case tests
				m["x"] = 1
				return nil, nil
			},
			errSub: "tool broken panicked: assignment to entry in nil map",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := tool.New(tool.Spec{Name: "broken"}, tc.fn)
			out, err := tool.SafeCall(context.Background(), tl, json.RawMessage(`{"a":1}`), "k1")
			if tc.errSub == "" {
				if err != nil || string(out) != tc.out {
					t.Fatalf("SafeCall = %s, %v; want %s", out, err, tc.out)
				}
				return
			}
			var te *tool.Error
			if !errors.As(err, &te) {
				t.Fatalf("SafeCall error %v (%T), want *tool.Error", err, err)
			}
			if out != nil || !strings.Contains(err.Error(), tc.errSub) || te.Retryable != tc.retryable || tool.IsRetryable(err) != tc.retryable {
				t.Fatalf("SafeCall = %s, %v (retryable %v); want error containing %q, retryable %v", out, err, te.Retryable, tc.errSub, tc.retryable)
			}
		})
	}
}

func TestIsRetryable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"retryable tool error", &tool.Error{Message: "busy", Retryable: true}, true},
		{"non-retryable tool error", &tool.Error{Message: "gone"}, false},
		{"wrapped non-retryable", fmt.Errorf("calling: %w", &tool.Error{Message: "gone"}), false},
		{"wrapped retryable", fmt.Errorf("calling: %w", &tool.Error{Message: "busy", Retryable: true}), true},
		{"plain error", errors.New("something broke"), true},
		{"context error", context.Canceled, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tool.IsRetryable(tc.err); got != tc.want {
				t.Fatalf("IsRetryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	cause := errors.New("dial tcp: refused")
	for _, tc := range []struct {
		err  *tool.Error
		want string
	}{
		{&tool.Error{Message: "not found"}, "not found"},
		{&tool.Error{Err: cause}, "dial tcp: refused"},
		{&tool.Error{Message: "lookup failed", Err: cause}, "lookup failed"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
	if !errors.Is(&tool.Error{Message: "x", Err: cause}, cause) {
		t.Error("Unwrap does not expose the underlying error")
	}
}

func TestInfoContext(t *testing.T) {
	if tool.InfoFrom(context.Background()) != nil {
		t.Fatal("InfoFrom on a bare context should be nil")
	}
	info := &tool.Info{RunID: "r", Iteration: 2, Index: 1, Seq: 3, Key: "r/2/1"}
	if got := tool.InfoFrom(tool.WithInfo(context.Background(), info)); got != info {
		t.Fatalf("InfoFrom = %+v, want %+v", got, info)
	}
}

func ExampleNew() {
	lookup := tool.New(tool.Spec{
		Name:        "lookup",
		Description: "Look up an order.",
		InputSchema: json.RawMessage(`{"type": "object", "required": ["order_id"]}`),
	}, func(_ context.Context, args json.RawMessage, key string) (json.RawMessage, error) {
		var in struct {
			OrderID string `json:"order_id"`
		}
		if err := json.Unmarshal(args, &in); err != nil {
			return nil, &tool.Error{Message: "bad arguments", Err: err}
		}
		return json.Marshal(map[string]string{"order_id": in.OrderID, "status": "delivered", "key": key})
	})

	out, err := tool.SafeCall(context.Background(), lookup, json.RawMessage(`{"order_id": "O-104"}`), "run-1/1/0")
	fmt.Println(lookup.Spec().Name, string(out), err)
	// Output: lookup {"key":"run-1/1/0","order_id":"O-104","status":"delivered"} <nil>
}
