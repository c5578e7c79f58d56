package operator_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/reins-run/reins/operator"
)

// quoted finds the string values of a TOML document, roughly: quoted text after "=" or ","
// (or the "[" of a list) and not itself followed by "=" (a quoted key).
var quoted = regexp.MustCompile(`[=,]\s*\[?\s*"([^"\\\n]{9,})"(\s*=)?`)

// FuzzLoad: any bytes as an operator's configuration either load or fail with problems that
// each name the file, are one line, and never quote a value of the file.
func FuzzLoad(f *testing.F) {
	if data, err := os.ReadFile("testdata/ops.toml"); err == nil {
		f.Add(data)
	}
	for _, s := range []string{
		"", "[providers]", "[providers.x]\nkind = 1\n", "[principals.a]\ntoken_sha256 = \"zz\"\nroles = []\n",
		"[limits]\nmax_input_bytes = \"9999999999999GiB\"\n", "custom_roles = [\"admin\"]\n",
		"[mcp.m]\ncommand = []\n", "[providers.p]\nkind = \"openai\"\nbase_url = \"ftp://secret-host-name/v1\"\n",
		"[principals.bo]\ntoken_env = \"1BAD\"\nroles = [\"viewer\"]\n", "a = \"hunter2-hunter2\"\n[[b]]\n", "[providers.p]\nkind = \"sk-live-12345abc\"\n",
		"[limits]\nmax_loop_iterations = -1\nmax_events_per_run = \"sk-live-12345abc\"\nmax_steps = 99999999999\nmax_signals_per_run = 3\n",
		"[providers.p]\nkind = \"openai\"\nbase_url = \"http://h/v1\"\nrpm = -1\ntpm = \"sk-live-12345abc\"\n[providers.p.model_limits.\"gpt-4.1\"]\nmax_concurrent = 2\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := operator.Parse("fuzz.toml", data)
		if err == nil {
			if cfg == nil || cfg.Limits.MaxInputBytes <= 0 || cfg.Limits.MaxOutputBytes <= 0 ||
				min(cfg.Limits.Growth.MaxLoopIterations, cfg.Limits.Growth.MaxAgentIterations, cfg.Limits.Growth.MaxSteps,
					cfg.Limits.Growth.MaxSignalsPerRun, cfg.Limits.Growth.MaxEventsPerRun) <= 0 {
				t.Fatalf("loaded %+v", cfg)
			}
			return
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			if !strings.HasPrefix(line, "fuzz.toml") {
				t.Fatalf("a problem that does not name the file: %q", line)
			}
		}
		for _, m := range quoted.FindAllSubmatch(data, -1) {
			v := string(m[1])
			if len(m[2]) > 0 || !secretLike(v) {
				continue // a quoted key (errors name keys), or a word errors may say themselves
			}
			// A role name is repeated, so that a typo shows ("unknown role \"aprover\""): a
			// name of the operator's, never a credential's place.
			said := strings.ReplaceAll(withoutKeys(err.Error()), `unknown role "`+v+`"`, "")
			if strings.Contains(said, v) {
				t.Fatalf("the error quotes the value %q: %v", v, err)
			}
		}
	})
}

// withoutKeys is text, problems of a configuration, without the key each names ("key K: "):
// a key is the operator's name for a place, which problems say, and a file may use the same
// text as a key and as a value.
func withoutKeys(text string) string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if before, rest, ok := strings.Cut(line, "key "); ok {
			if _, after, ok := strings.Cut(rest, ": "); ok {
				line = before + after
			}
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// secretLike reports whether v looks like a credential: letters and digits mixed.
func secretLike(v string) bool {
	return strings.ContainsAny(v, "0123456789") && strings.IndexFunc(v, func(r rune) bool { return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' }) >= 0
}
