package provider_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider"
)

func TestStatusError(t *testing.T) {
	for _, tt := range []struct {
		status    int
		header    http.Header
		msg       string
		retryable bool
		after     time.Duration
		want      string
	}{
		{429, http.Header{"Retry-After": {"7"}}, "slow down", true, 7 * time.Second, "openai: HTTP 429 Too Many Requests: slow down"},
		{429, http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"9"}}, "x", true, 250 * time.Millisecond, "openai: HTTP 429 Too Many Requests: x"},
		{500, nil, "", true, 0, "openai: HTTP 500 Internal Server Error: no error message"},
		{529, nil, "Overloaded", true, 0, "openai: HTTP 529: Overloaded"},
		{408, nil, "t", true, 0, "openai: HTTP 408 Request Timeout: t"},
		{400, nil, "bad tool schema", false, 0, "openai: HTTP 400 Bad Request: bad tool schema"},
		{401, nil, "Incorrect API key", false, 0, "openai: HTTP 401 Unauthorized: Incorrect API key"},
		{404, http.Header{"Retry-After": {"soon"}}, "no such model", false, 0, "openai: HTTP 404 Not Found: no such model"},
	} {
		e := provider.StatusError("openai", tt.status, tt.header, tt.msg, nil)
		if e.Retryable != tt.retryable || e.Status != tt.status || e.RetryAfter != tt.after || e.Message != tt.want {
			t.Errorf("%d: got %+v", tt.status, e)
		}
	}
}

func TestRetryAfterHTTPDate(t *testing.T) {
	at := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	d := provider.RetryAfter(http.Header{"Retry-After": {at}})
	if d <= 60*time.Second || d > 90*time.Second {
		t.Fatalf("Retry-After %s gave %s", at, d)
	}
}

type notRetryable struct{}

func (notRetryable) Error() string { return "not in the cassette" }
func (notRetryable) NotRetryable() {}

func TestTransportError(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	refused := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	for _, tt := range []struct {
		name      string
		ctx       context.Context
		err       error
		retryable bool
		passes    error // the caller's own context error, returned as is
	}{
		{"caller cancelled", cancelled, refused, false, context.Canceled},
		{"own timeout", live, fmt.Errorf("reading: %w", context.DeadlineExceeded), true, nil},
		{"connection refused", live, refused, true, nil},
		{"not retryable", live, fmt.Errorf("wrapped: %w", notRetryable{}), false, nil},
	} {
		err := provider.TransportError("anthropic", tt.ctx, time.Second, tt.err)
		if tt.passes != nil {
			if !errors.Is(err, tt.passes) {
				t.Errorf("%s: %v, want the caller's %v", tt.name, err, tt.passes)
			}
			continue
		}
		var me *model.Error
		if !errors.As(err, &me) || me.Retryable != tt.retryable {
			t.Errorf("%s: %v (%T), want retryable=%v", tt.name, err, err, tt.retryable)
		}
	}
}

func TestPrices(t *testing.T) {
	p := provider.Prices{"gpt-4.1-mini": {InputPerMTok: 1, OutputPerMTok: 2}}
	u := model.Usage{InputTokens: 1_000_000, OutputTokens: 500_000}
	if c := p.Cost("gpt-4.1-mini-2025-04-14", u); c != 2 {
		t.Errorf("override: cost %v, want 2", c)
	}
	if c := p.Cost("gpt-4.1-2025-04-14", u); c != 2+4 { // default gpt-4.1: 2.00 in, 8.00 out
		t.Errorf("default: cost %v, want 6", c)
	}
	if c := p.Cost("my-local-model", u); c != 0 {
		t.Errorf("unknown model: cost %v, want 0", c)
	}
	for _, bad := range []string{"gpt", "gpt=1", "gpt=a,b", "=1,2", "gpt=-1,2"} {
		if _, _, err := provider.ParsePrice(bad); err == nil {
			t.Errorf("ParsePrice(%q) accepted", bad)
		}
	}
	name, price, err := provider.ParsePrice("qwen=0.1, 0.2")
	if err != nil || name != "qwen" || price.InputPerMTok != 0.1 || price.OutputPerMTok != 0.2 {
		t.Errorf("ParsePrice: %s %+v %v", name, price, err)
	}
}
