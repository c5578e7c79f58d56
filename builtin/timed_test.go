package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/reins-run/reins/tool"
)

// TestTimedTool: a call past its tool's timeout fails retryably, naming the tool and the
// timeout; a call whose caller's context ends first returns that end, not a tool timeout; a call
// within its timeout returns what the tool did.
func TestTimedTool(t *testing.T) {
	blocks := tool.New(tool.Spec{Name: "slow"}, func(ctx context.Context, _ json.RawMessage, _ string) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	quick := tool.New(tool.Spec{Name: "quick"}, func(context.Context, json.RawMessage, string) (json.RawMessage, error) {
		return json.RawMessage(`"done"`), nil
	})
	ended, end := context.WithCancel(context.Background())
	end()
	for _, tc := range []struct {
		name    string
		tool    tool.Tool
		ctx     context.Context
		timeout time.Duration
		want    string // the error, "" for none
		retry   bool
	}{
		{"past its timeout", blocks, context.Background(), time.Millisecond, "tool slow did not answer within its timeout of 1ms", true},
		{"caller ended first", blocks, ended, time.Hour, "context canceled", false},
		{"within its timeout", quick, context.Background(), time.Hour, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := timed(tc.tool, tc.timeout).Call(tc.ctx, nil, "k")
			if tc.want == "" {
				if err != nil || string(out) != `"done"` {
					t.Fatalf("got %s, %v; want \"done\"", out, err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			var te *tool.Error
			if retry := errors.As(err, &te) && te.Retryable; retry != tc.retry {
				t.Errorf("retryable %v, want %v", retry, tc.retry)
			}
		})
	}
}
