package provider_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider"
)

const key = "sk-proj-0123456789abcdefghijklmnop"

func TestScrub(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Incorrect API key provided: " + key + ".", "Incorrect API key provided: [redacted]."},
		{"key " + key[:12] + "**** rejected", "key [redacted]**** rejected"},
		{"…" + key[len(key)-10:] + " is unknown", "…[redacted] is unknown"},
		{"a 7-byte piece " + key[:7] + " stays", "a 7-byte piece " + key[:7] + " stays"},
		{"twice " + key + " and " + key, "twice [redacted] and [redacted]"},
		{"nothing here", "nothing here"},
	} {
		if got := provider.Scrub(tc.in, key); got != tc.want {
			t.Errorf("Scrub(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := provider.Scrub("pin 1234 used", "1234"); got != "pin [redacted] used" {
		t.Errorf("a short secret: %q", got)
	}
}

func TestRedact(t *testing.T) {
	cause := fmt.Errorf("POST /v1/chat/completions: 401 {\"message\":\"bad key %s\"}", key)
	err := provider.Redact(&model.Error{Message: "openai: HTTP 401 Unauthorized: bad key " + key, Status: 401, Err: cause}, key)
	for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err), errors.Unwrap(err).Error()} {
		if strings.Contains(text, key[:8]) || strings.Contains(text, key[10:18]) {
			t.Errorf("the key shows: %s", text)
		}
	}
	var me *model.Error
	if !errors.As(err, &me) || me.Status != 401 || !errors.Is(err, cause) {
		t.Errorf("Redact lost the error's type or cause: %v", err)
	}
	cfg := provider.Config{Model: "m", APIKey: key}
	for _, text := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg)} {
		if strings.Contains(text, key) {
			t.Errorf("a printed Config shows the key: %s", text)
		}
	}
}
