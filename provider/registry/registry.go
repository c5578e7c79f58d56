// Package registry opens a model by name: "openai:gpt-4.1-mini", "anthropic:claude-sonnet-4-5",
// or "replay:path/to/cassette.json". It resolves the base URL and API key from options or the
// environment, and wires in recording (Options.Record) and replay.
//
// It owns naming and configuration resolution only; the protocols are in provider/openai and
// provider/anthropic, the cassettes in provider/cassette.
package registry

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/reins-run/reins/internal/suggest"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider"
	"github.com/reins-run/reins/provider/anthropic"
	"github.com/reins-run/reins/provider/cassette"
	"github.com/reins-run/reins/provider/openai"
)

// ErrName is wrapped by errors about the model name itself.
var ErrName = errors.New("invalid model name")

// Options are the settings a user gives besides the name (flags, workflow files). Empty fields
// fall back to the environment: OPENAI_API_KEY, OPENAI_BASE_URL, ANTHROPIC_API_KEY,
// ANTHROPIC_BASE_URL.
type Options struct {
	BaseURL         string
	APIKey          string
	Timeout         time.Duration
	MaxOutputTokens int
	Stream          bool
	Prices          provider.Prices
	// Record, when set, records every exchange of a real provider into this cassette file.
	Record string
	// Getenv reads the environment (nil: os.Getenv); tests replace it.
	Getenv func(string) string
	// NoEnv reads nothing from the environment: BaseURL and APIKey are all there is. A shared
	// server's workers open the operator's providers so, so that a key goes only to the
	// endpoint the operator paired it with.
	NoEnv bool
}

// String shows the options with the API key hidden, so that printing them never shows it.
func (o Options) String() string {
	key := ""
	if o.APIKey != "" {
		key = "[redacted]"
	}
	return fmt.Sprintf("{BaseURL:%s APIKey:%s Timeout:%s MaxOutputTokens:%d Stream:%t Record:%s NoEnv:%t}", o.BaseURL, key, o.Timeout, o.MaxOutputTokens, o.Stream, o.Record, o.NoEnv)
}

// GoString is String, for %#v.
func (o Options) GoString() string { return "registry.Options" + o.String() }

// Providers lists the provider names Open accepts.
var Providers = []string{"openai", "anthropic", "replay"}

// defaults of each real provider: its environment variables and the path of its default base URL.
var defaults = map[string]struct {
	keyEnv, urlEnv, basePath string
}{
	"openai":    {"OPENAI_API_KEY", "OPENAI_BASE_URL", "/v1"},
	"anthropic": {"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", ""},
}

// KeyEnv names the environment variables a real provider reads when no option gives its API
// key or base URL (OPENAI_API_KEY and OPENAI_BASE_URL for openai); "" for any other provider.
func KeyEnv(providerName string) (keyEnv, urlEnv string) {
	d := defaults[providerName]
	return d.keyEnv, d.urlEnv
}

// Split parses "PROVIDER:NAME".
func Split(name string) (providerName, modelName string, err error) {
	p, m, ok := strings.Cut(name, ":")
	if !ok || p == "" || m == "" {
		if guess := Guess(name); guess != "" {
			return "", "", fmt.Errorf("%w %q: write PROVIDER:NAME: did you mean %s?", ErrName, name, guess)
		}
		return "", "", fmt.Errorf("%w %q: write PROVIDER:NAME, e.g. openai:gpt-4.1-mini, anthropic:claude-sonnet-4-5 or replay:cassette.json", ErrName, name)
	}
	for _, known := range Providers {
		if p == known {
			return p, m, nil
		}
	}
	if near := suggest.Closest(p, Providers); near != "" {
		return "", "", fmt.Errorf("%w %q: unknown provider %q: did you mean %s:%s?", ErrName, name, p, near, m)
	}
	return "", "", fmt.Errorf("%w %q: unknown provider %q (known: %s)", ErrName, name, p, strings.Join(Providers, ", "))
}

// modelFamilies are the prefixes of the model names of each real provider, for Guess.
var modelFamilies = []struct{ prefix, provider string }{
	{"gpt-", "openai"}, {"chatgpt-", "openai"}, {"o1", "openai"}, {"o3", "openai"}, {"o4", "openai"},
	{"claude-", "anthropic"},
}

// Guess returns PROVIDER:NAME for a model name given without its provider whose family says
// which provider serves it ("gpt-4o-mini": "openai:gpt-4o-mini"), else "".
func Guess(name string) string {
	if strings.Contains(name, ":") {
		return ""
	}
	for _, f := range modelFamilies {
		if strings.HasPrefix(name, f.prefix) {
			return f.provider + ":" + name
		}
	}
	return ""
}

// Open returns the model named name.
func Open(name string, opts Options) (model.Model, error) {
	p, m, err := Split(name)
	if err != nil {
		return nil, err
	}
	if p == "replay" {
		return openReplay(m, opts)
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	d := defaults[p]
	cfg := provider.Config{
		Model: m, BaseURL: opts.BaseURL, APIKey: opts.APIKey, Timeout: opts.Timeout,
		MaxOutputTokens: opts.MaxOutputTokens, Stream: opts.Stream, Prices: opts.Prices,
	}
	if cfg.BaseURL == "" && !opts.NoEnv {
		cfg.BaseURL = getenv(d.urlEnv)
	}
	if cfg.APIKey == "" && !opts.NoEnv {
		cfg.APIKey = getenv(d.keyEnv)
	}
	if cfg.APIKey == "" && cfg.BaseURL == "" {
		return nil, fmt.Errorf("%s needs an API key: set %s or pass --api-key (a local server given with --base-url needs none)", name, d.keyEnv)
	}
	if opts.Record != "" {
		basePath := d.basePath
		if cfg.BaseURL != "" {
			u, err := url.Parse(cfg.BaseURL)
			if err != nil {
				return nil, fmt.Errorf("base URL %q: %w", cfg.BaseURL, err)
			}
			basePath = strings.TrimSuffix(u.Path, "/")
		}
		rec := cassette.NewRecorder(opts.Record, cassette.Cassette{Provider: p, Model: m, BasePath: basePath}, nil, cfg.APIKey)
		cfg.HTTPClient = rec.Client()
	}
	return open(p, cfg)
}

func open(p string, cfg provider.Config) (model.Model, error) {
	switch p {
	case "openai":
		return openai.New(cfg)
	case "anthropic":
		return anthropic.New(cfg)
	}
	return nil, fmt.Errorf("%w: provider %q cannot be opened directly", ErrName, p)
}

// openReplay serves a cassette through the provider that recorded it, so the SDK parses the
// recorded replies exactly as it parsed the live ones.
func openReplay(path string, opts Options) (model.Model, error) {
	c, err := cassette.Load(path)
	if err != nil {
		return nil, err
	}
	if _, ok := defaults[c.Provider]; !ok {
		return nil, fmt.Errorf("cassette %s: provider %q cannot be replayed (known: openai, anthropic)", path, c.Provider)
	}
	rp := cassette.NewReplayer(c, path)
	cfg := provider.Config{
		Model:   c.Model,
		BaseURL: "http://cassette.replay" + c.BasePath,
		APIKey:  "replay",
		Timeout: opts.Timeout, MaxOutputTokens: opts.MaxOutputTokens, Stream: opts.Stream, Prices: opts.Prices,
		HTTPClient: &http.Client{Transport: rp},
	}
	return open(c.Provider, cfg)
}
