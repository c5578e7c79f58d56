package registry_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reins-run/reins/provider/registry"
)

func TestSplit(t *testing.T) {
	for _, tt := range []struct {
		in, provider, model string
		ok                  bool
	}{
		{"openai:gpt-4.1-mini", "openai", "gpt-4.1-mini", true},
		{"anthropic:claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5", true},
		{"replay:testdata/c.json", "replay", "testdata/c.json", true},
		{"openai:org/model:tag", "openai", "org/model:tag", true}, // only the first colon splits
		{"gpt-4.1-mini", "", "", false},
		{"openai:", "", "", false},
		{":gpt", "", "", false},
		{"gemini:pro", "", "", false},
	} {
		p, m, err := registry.Split(tt.in)
		if (err == nil) != tt.ok || p != tt.provider || m != tt.model {
			t.Errorf("Split(%q) = %q, %q, %v", tt.in, p, m, err)
		}
		if err != nil && !errors.Is(err, registry.ErrName) {
			t.Errorf("Split(%q) error does not wrap ErrName: %v", tt.in, err)
		}
	}
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestOpenResolvesKeysAndBaseURLs(t *testing.T) {
	for _, tt := range []struct {
		name    string
		opts    registry.Options
		wantErr string
	}{
		{"openai:gpt-4.1-mini", registry.Options{Getenv: env(nil)}, "set OPENAI_API_KEY or pass --api-key"},
		{"anthropic:claude-sonnet-4-5", registry.Options{Getenv: env(nil)}, "set ANTHROPIC_API_KEY or pass --api-key"},
		{"openai:gpt-4.1-mini", registry.Options{Getenv: env(map[string]string{"OPENAI_API_KEY": "k"})}, ""},
		{"anthropic:claude-sonnet-4-5", registry.Options{Getenv: env(map[string]string{"ANTHROPIC_API_KEY": "k"})}, ""},
		{"openai:qwen", registry.Options{Getenv: env(map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"})}, ""},
		{"openai:qwen", registry.Options{BaseURL: "http://127.0.0.1:1/v1", Getenv: env(nil)}, ""},
		{"openai:gpt", registry.Options{APIKey: "k", Getenv: env(nil)}, ""},
		{"openai:gpt", registry.Options{BaseURL: "http://bad host/", Record: "x.json", Getenv: env(nil)}, "base URL"},
		{"cohere:command", registry.Options{}, "unknown provider"},
	} {
		m, err := registry.Open(tt.name, tt.opts)
		if tt.wantErr == "" {
			if err != nil || m == nil {
				t.Errorf("Open(%s): %v", tt.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("Open(%s): err %v, want one containing %q", tt.name, err, tt.wantErr)
		}
	}
}

// TestSplitSuggests: a model name without its provider, or with a misspelled one, is refused
// with the name the user likely meant.
func TestSplitSuggests(t *testing.T) {
	for _, tt := range []struct{ name, want string }{
		{"gpt-4o-mini", `invalid model name "gpt-4o-mini": write PROVIDER:NAME: did you mean openai:gpt-4o-mini?`},
		{"o3-mini", `invalid model name "o3-mini": write PROVIDER:NAME: did you mean openai:o3-mini?`},
		{"claude-sonnet-4-5", `invalid model name "claude-sonnet-4-5": write PROVIDER:NAME: did you mean anthropic:claude-sonnet-4-5?`},
		{"qwen2.5", `invalid model name "qwen2.5": write PROVIDER:NAME, e.g. openai:gpt-4.1-mini`},
		{"opnai:gpt-4o", `invalid model name "opnai:gpt-4o": unknown provider "opnai": did you mean openai:gpt-4o?`},
		{"antropic:claude-haiku", `unknown provider "antropic": did you mean anthropic:claude-haiku?`},
		{"cohere:command", `unknown provider "cohere" (known: openai, anthropic, replay)`},
	} {
		_, _, err := registry.Split(tt.name)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Split(%s): %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestOpenReplayErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := registry.Open("replay:"+filepath.Join(dir, "missing.json"), registry.Options{}); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing cassette: %v", err)
	}
	odd := filepath.Join(dir, "odd.json")
	if err := os.WriteFile(odd, []byte(`{"version":1,"provider":"scripted","interactions":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := registry.Open("replay:"+odd, registry.Options{}); err == nil || !strings.Contains(err.Error(), `provider "scripted" cannot be replayed`) {
		t.Errorf("unreplayable provider: %v", err)
	}
}
