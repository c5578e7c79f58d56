package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/reins-run/reins/tool"
)

type refundIn struct {
	OrderID string   `json:"order_id" jsonschema:"the order to refund"`
	Amount  float64  `json:"amount"`
	Reason  string   `json:"reason" enum:"late,damaged,lost"`
	Note    string   `json:"note,omitempty"`
	Lines   []lineIn `json:"lines,omitempty"`
}

type lineIn struct {
	SKU      string `json:"sku"`
	Priority int    `json:"priority,omitempty" enum:"1,2,3"`
}

type refundOut struct {
	RefundID string `json:"refund_id"`
	Key      string `json:"key"`
}

func issueRefund(ctx context.Context, in refundIn) (refundOut, error) {
	return refundOut{RefundID: "R-" + in.OrderID, Key: tool.InfoFrom(ctx).Key}, nil
}

func TestFuncSchema(t *testing.T) {
	refund := tool.Func("issue_refund", "Issue a refund.", issueRefund, tool.Writes(), tool.RequiresApproval())
	spec := refund.Spec()
	if spec.Name != "issue_refund" || spec.Description != "Issue a refund." || !spec.SideEffect || !spec.NeedsApproval {
		t.Fatalf("spec %+v", spec)
	}
	var schema struct {
		Type                 string   `json:"type"`
		Required             []string `json:"required"`
		AdditionalProperties any      `json:"additionalProperties"`
		Properties           map[string]struct {
			Type        any    `json:"type"`
			Description string `json:"description"`
			Enum        []any  `json:"enum"`
			Items       struct {
				Properties map[string]struct {
					Enum []any `json:"enum"`
				} `json:"properties"`
			} `json:"items"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(spec.InputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	if schema.Type != "object" || schema.AdditionalProperties != false {
		t.Errorf("type %q, additionalProperties %v", schema.Type, schema.AdditionalProperties)
	}
	if got := strings.Join(schema.Required, ","); got != "order_id,amount,reason" {
		t.Errorf("required %s, want order_id,amount,reason (omitempty fields are optional)", got)
	}
	if d := schema.Properties["order_id"].Description; d != "the order to refund" {
		t.Errorf("description %q", d)
	}
	if e := fmt.Sprint(schema.Properties["reason"].Enum); e != "[late damaged lost]" {
		t.Errorf("reason enum %s", e)
	}
	if e := fmt.Sprint(schema.Properties["lines"].Items.Properties["priority"].Enum); e != "[1 2 3]" {
		t.Errorf("nested enum %s", e)
	}
}

// The generated schema is the one the loop validates against: a table of arguments.
func TestFuncSchemaValidates(t *testing.T) {
	refund := tool.Func("issue_refund", "", issueRefund)
	v, err := tool.NewValidator("issue_refund", refund.Spec().InputSchema)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args string
		ok   bool
	}{
		{`{"order_id":"O-1","amount":5,"reason":"late"}`, true},
		{`{"order_id":"O-1","amount":5,"reason":"late","lines":[{"sku":"A","priority":2}]}`, true},
		{`{"order_id":"O-1","amount":5}`, false},                           // reason missing
		{`{"order_id":"O-1","amount":5,"reason":"bored"}`, false},          // not in the enum
		{`{"order_id":"O-1","amount":"5","reason":"late"}`, false},         // wrong type
		{`{"order_id":"O-1","amount":5,"reason":"late","extra":1}`, false}, // unknown property
		{`{"order_id":"O-1","amount":5,"reason":"late","lines":[{"sku":"A","priority":9}]}`, false},
	} {
		parsed, err := tool.Parse(json.RawMessage(tt.args))
		if err == nil {
			err = v.Validate(parsed)
		}
		if (err == nil) != tt.ok {
			t.Errorf("%s: error %v, want ok=%v", tt.args, err, tt.ok)
		}
	}
}

func TestFuncCall(t *testing.T) {
	refund := tool.Func("issue_refund", "", issueRefund)
	ctx := tool.WithInfo(context.Background(), &tool.Info{Key: "run/1/0"})
	out, err := refund.Call(ctx, json.RawMessage(`{"order_id":"O-7","amount":5,"reason":"lost"}`), "run/1/0")
	if err != nil || string(out) != `{"refund_id":"R-O-7","key":"run/1/0"}` {
		t.Fatalf("out %s, err %v", out, err)
	}
	// Arguments that do not decode into In are a retryable tool error, not a panic.
	_, err = refund.Call(ctx, json.RawMessage(`{"amount":"five"}`), "run/1/1")
	var te *tool.Error
	if !errors.As(err, &te) || !te.Retryable || !strings.Contains(te.Message, "do not fit") {
		t.Fatalf("err %v", err)
	}
	// The function's own error passes through unchanged.
	boom := errors.New("payments service down")
	failing := tool.Func("f", "", func(context.Context, refundIn) (refundOut, error) { return refundOut{}, boom })
	if _, err := failing.Call(ctx, json.RawMessage(`{}`), "k"); !errors.Is(err, boom) {
		t.Fatalf("err %v, want the function's error", err)
	}
}

func TestNewFuncRejectsUndescribableInput(t *testing.T) {
	for name, mk := range map[string]func() error{
		"channel field": func() error {
			_, err := tool.NewFunc("c", "", func(context.Context, struct{ C chan int }) (int, error) { return 0, nil })
			return err
		},
		"not a struct": func() error {
			_, err := tool.NewFunc("s", "", func(context.Context, string) (int, error) { return 0, nil })
			return err
		},
		"enum on a bool": func() error {
			_, err := tool.NewFunc("b", "", func(context.Context, struct {
				B bool `json:"b" enum:"true"`
			}) (int, error) {
				return 0, nil
			})
			return err
		},
		"enum not an integer": func() error {
			_, err := tool.NewFunc("i", "", func(context.Context, struct {
				N int `json:"n" enum:"one"`
			}) (int, error) {
				return 0, nil
			})
			return err
		},
	} {
		if err := mk(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Func did not panic on an undescribable input")
		}
	}()
	tool.Func("s", "", func(context.Context, string) (int, error) { return 0, nil })
}

func ExampleFunc() {
	type lookupIn struct {
		OrderID string `json:"order_id" jsonschema:"the order to look up"`
	}
	type lookupOut struct {
		Status string `json:"status"`
	}
	lookup := tool.Func("read_order", "Read an order by id.",
		func(ctx context.Context, in lookupIn) (lookupOut, error) {
			return lookupOut{Status: "delivered"}, nil
		})
	fmt.Println(string(lookup.Spec().InputSchema))
	out, _ := lookup.Call(context.Background(), json.RawMessage(`{"order_id":"O-104"}`), "run/1/0")
	fmt.Println(string(out))
	// Output:
	// {"type":"object","properties":{"order_id":{"type":"string","description":"the order to look up"}},"required":["order_id"],"additionalProperties":false}
	// {"status":"delivered"}
}
