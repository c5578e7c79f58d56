// Package provider holds what every real model provider shares: its configuration, the price
// table that turns token usage into cost, and the classification of failures into the loop's
// retry rules (*model.Error with Retryable, Status and RetryAfter).
//
// The providers themselves live in subpackages (provider/openai, provider/anthropic), recording
// and replay in provider/cassette, and opening a model by name ("openai:gpt-4.1-mini") in
// provider/registry. This package must not import any of them, nor the loop: a provider only
// turns a model.Request into a model.Response.
package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/reins-run/reins/model"
)

// Config configures one provider client.
type Config struct {
	// Model is the provider's model name, e.g. "gpt-4.1-mini" or "claude-sonnet-4-5".
	Model string
	// BaseURL points the client at another server speaking the same protocol (vLLM, Ollama,
	// llama.cpp server, a local test server). Empty means the provider's own API.
	BaseURL string
	// APIKey authenticates the client. It is never written to logs, errors or cassettes.
	APIKey string
	// Timeout bounds one model call, streaming included (default 2m). A call past it fails with
	// a retryable error; the caller's own context cancellation is returned as is.
	Timeout time.Duration
	// MaxRetries is how many times the SDK itself retries a failed request (default 0): the loop
	// retries on its own clock, honouring Retry-After, and counts retries against its budgets.
	MaxRetries int
	// MaxOutputTokens caps each reply (default 4096; Anthropic requires a cap).
	MaxOutputTokens int
	// OutputLimit is the most output tokens the model gives in one reply: how far a call that
	// asks again after a cut-off reply (Request.RaiseOutputTokens) may raise the cap. 0 means
	// the model's entry in DefaultOutputLimits, else MaxOutputTokens (a model whose limit is not
	// known is never asked for more than its cap).
	OutputLimit int
	// Stream makes every call stream even without a delta callback.
	Stream bool
	// Prices overrides or extends DefaultPrices for this client.
	Prices Prices
	// HTTPClient, when set, carries every request: the cassette recorder and replayer plug in here.
	HTTPClient *http.Client
}

// String shows the configuration with the API key hidden, so that printing it (%v, %+v, a log
// line) never shows the key.
func (c Config) String() string {
	key := ""
	if c.APIKey != "" {
		key = Redacted
	}
	return fmt.Sprintf("{Model:%s BaseURL:%s APIKey:%s Timeout:%s MaxRetries:%d MaxOutputTokens:%d Stream:%t}",
		c.Model, c.BaseURL, key, c.Timeout, c.MaxRetries, c.MaxOutputTokens, c.Stream)
}

// GoString is String, for %#v.
func (c Config) GoString() string { return "provider.Config" + c.String() }

// WithDefaults fills in the documented defaults.
func (c Config) WithDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Minute
	}
	if c.MaxOutputTokens <= 0 {
		c.MaxOutputTokens = 4096
	}
	if c.MaxRetries < 0 {
		c.MaxRetries = 0
	}
	return c
}

// DefaultOutputLimits are the output limits (tokens in one reply) of common models, matched as
// DefaultPrices are: by the longest key that is a prefix of the model's name.
var DefaultOutputLimits = map[string]int{
	"gpt-4.1":           32768,
	"gpt-4o":            16384,
	"gpt-5":             128000,
	"o3":                100000,
	"o4-mini":           100000,
	"claude-opus-4":     32000,
	"claude-opus-4-5":   64000,
	"claude-sonnet-4":   64000,
	"claude-haiku-4-5":  64000,
	"claude-3-5-haiku":  8192,
	"claude-3-7-sonnet": 64000,
}

// Limit is the output limit of the configured model (see OutputLimit), never below
// MaxOutputTokens.
func (c Config) Limit() int64 {
	n := c.OutputLimit
	if n <= 0 {
		n, _ = longestPrefix(DefaultOutputLimits, c.Model)
	}
	return int64(max(n, c.MaxOutputTokens))
}

// Price is what a model costs in US dollars per million tokens.
type Price struct {
	InputPerMTok  float64 `json:"input_per_mtok" toml:"input_per_mtok"`
	OutputPerMTok float64 `json:"output_per_mtok" toml:"output_per_mtok"`
}

// Prices maps model names, or name prefixes, to prices.
type Prices map[string]Price

// DefaultPrices are list prices (USD per million tokens) of common models. A model matches the
// longest key that is a prefix of its name, so "gpt-4.1-mini-2025-04-14" takes "gpt-4.1-mini".
// A model with no entry costs 0: set a price (Config.Prices, --price) to use max_cost_usd.
var DefaultPrices = Prices{
	"gpt-4.1":           {2.00, 8.00},
	"gpt-4.1-mini":      {0.40, 1.60},
	"gpt-4.1-nano":      {0.10, 0.40},
	"gpt-4o":            {2.50, 10.00},
	"gpt-4o-mini":       {0.15, 0.60},
	"gpt-5":             {1.25, 10.00},
	"gpt-5-mini":        {0.25, 2.00},
	"gpt-5-nano":        {0.05, 0.40},
	"o3":                {2.00, 8.00},
	"o4-mini":           {1.10, 4.40},
	"claude-opus-4":     {15.00, 75.00},
	"claude-sonnet-4":   {3.00, 15.00},
	"claude-haiku-4-5":  {1.00, 5.00},
	"claude-3-5-haiku":  {0.80, 4.00},
	"claude-3-7-sonnet": {3.00, 15.00},
}

// Lookup finds the price of a model: the longest matching key of p, else of DefaultPrices.
func (p Prices) Lookup(modelName string) (Price, bool) {
	if price, ok := longestPrefix(p, modelName); ok {
		return price, true
	}
	return longestPrefix(DefaultPrices, modelName)
}

func longestPrefix[V any](p map[string]V, name string) (V, bool) {
	best, found := "", false
	for k := range p {
		if strings.HasPrefix(name, k) && len(k) >= len(best) {
			best, found = k, true
		}
	}
	return p[best], found
}

// PerToken is the price of a model in US dollars per input and per output token, and whether it
// has one (model.Pricing).
func (p Prices) PerToken(modelName string) (input, output float64, ok bool) {
	price, ok := p.Lookup(modelName)
	return price.InputPerMTok / 1e6, price.OutputPerMTok / 1e6, ok
}

// ReplyCap is the reply cap a provider sends for req: the client's MaxOutputTokens, raised to
// the request's RaiseOutputTokens within the model's output limit (Config.Limit), then the
// smaller of that and the request's MaxOutputTokens (what the loop's budgets leave), at least 1.
func ReplyCap(c Config, req *model.Request) int64 {
	n := int64(c.MaxOutputTokens)
	if req.RaiseOutputTokens > n {
		n = min(req.RaiseOutputTokens, c.Limit())
	}
	if req.MaxOutputTokens > 0 && (n <= 0 || req.MaxOutputTokens < n) {
		n = req.MaxOutputTokens
	}
	return max(n, 1)
}

// Cost is the price of one call's usage.
func (p Prices) Cost(modelName string, u model.Usage) float64 {
	price, ok := p.Lookup(modelName)
	if !ok {
		return 0
	}
	return (float64(u.InputTokens)*price.InputPerMTok + float64(u.OutputTokens)*price.OutputPerMTok) / 1e6
}

// ParsePrice reads "MODEL=INPUT,OUTPUT" (USD per million tokens), the form of the --price flag.
func ParsePrice(s string) (string, Price, error) {
	name, rest, ok := strings.Cut(s, "=")
	in, out, ok2 := strings.Cut(rest, ",")
	if !ok || !ok2 || name == "" {
		return "", Price{}, fmt.Errorf("price %q is not MODEL=INPUT,OUTPUT (USD per million tokens, e.g. gpt-4.1-mini=0.40,1.60)", s)
	}
	pin, err1 := strconv.ParseFloat(strings.TrimSpace(in), 64)
	pout, err2 := strconv.ParseFloat(strings.TrimSpace(out), 64)
	if err1 != nil || err2 != nil || pin < 0 || pout < 0 {
		return "", Price{}, fmt.Errorf("price %q: input and output must be non-negative numbers (USD per million tokens)", s)
	}
	return name, Price{InputPerMTok: pin, OutputPerMTok: pout}, nil
}

// RetryableStatus reports whether an HTTP status is worth retrying: timeouts, conflicts, rate
// limits and server errors.
func RetryableStatus(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= 500
}

// StatusError builds the error for a provider's non-2xx reply: retryable for 408, 409, 429 and
// 5xx with the server's Retry-After, and a clear non-retryable error for any other 4xx.
func StatusError(providerName string, status int, header http.Header, message string, cause error) *model.Error {
	message = strings.TrimSpace(message)
	text := http.StatusText(status)
	if message == "" {
		message = "no error message"
	}
	if text != "" {
		text = " " + text // 529 (Anthropic's "overloaded") has no standard text
	}
	return &model.Error{
		Message:    fmt.Sprintf("%s: HTTP %d%s: %s", providerName, status, text, message),
		Retryable:  RetryableStatus(status),
		Status:     status,
		RetryAfter: RetryAfter(header),
		Err:        cause,
	}
}

// RetryAfter reads how long a server asked the client to wait: retry-after-ms (milliseconds,
// sent by OpenAI), else Retry-After in seconds or as an HTTP date. Zero when absent or invalid.
func RetryAfter(h http.Header) time.Duration {
	if h == nil {
		return 0
	}
	if ms, err := strconv.ParseFloat(h.Get("Retry-After-Ms"), 64); err == nil && ms > 0 {
		return time.Duration(ms * float64(time.Millisecond))
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil && secs > 0 {
		return time.Duration(secs * float64(time.Second))
	}
	if at, err := http.ParseTime(v); err == nil {
		if d := time.Until(at); d > 0 {
			return d
		}
	}
	return 0
}

// NotRetryable marks transport errors that retrying cannot fix, such as a request missing from a
// replay cassette.
type NotRetryable interface {
	error
	NotRetryable()
}

// TransportError classifies a failure that is not an HTTP status: the caller's cancellation or
// deadline is returned as is (the loop turns it into cancelled or timeout); the call's own
// Timeout running out, a refused connection or a dropped stream are retryable.
func TransportError(providerName string, callerCtx context.Context, timeout time.Duration, err error) error {
	if cerr := callerCtx.Err(); cerr != nil {
		return cerr
	}
	var nr NotRetryable
	if errors.As(err, &nr) {
		return &model.Error{Message: providerName + ": " + nr.Error(), Err: err}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &model.Error{Message: fmt.Sprintf("%s: no complete reply within %s", providerName, timeout), Retryable: true, Err: err}
	}
	return &model.Error{Message: fmt.Sprintf("%s: %v", providerName, err), Retryable: true, Err: err}
}
