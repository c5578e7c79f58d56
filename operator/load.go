package operator

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/reins-run/reins/workflow"
)

// Problem is one thing wrong with an operator's configuration file: where (file, line, key)
// and one sentence, without a code. It never quotes a value of the file: a configuration may
// hold a secret where it should not, and errors reach logs.
type Problem = workflow.Problem

// Problems is every problem of a file; as an error it reads as all of them, one a line.
type Problems = workflow.Problems

// namePattern is what names of providers, MCP servers, principals and custom roles match:
// principal names become NATS subject tokens.
var namePattern = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

// Official endpoints of the provider kinds.
var officialURL = map[string]string{
	"openai":    "https://api.openai.com/v1",
	"anthropic": "https://api.anthropic.com",
}

// Default returns the configuration of a server started without one: providers openai and
// anthropic on their official endpoints with the keys of OPENAI_API_KEY and ANTHROPIC_API_KEY
// (optional: a missing key fails only the calls through that provider), no MCP servers, no
// principals but the data directory's admin (added by the server), 64 MiB limits and the
// default growth limits ([DefaultGrowth]).
func Default() *Config {
	return &Config{
		Providers: map[string]Provider{
			"openai":    {Kind: "openai", BaseURL: officialURL["openai"], APIKeyEnv: "OPENAI_API_KEY", optional: true},
			"anthropic": {Kind: "anthropic", BaseURL: officialURL["anthropic"], APIKeyEnv: "ANTHROPIC_API_KEY", optional: true},
		},
		MCP:        map[string]MCPServer{},
		Principals: map[string]Principal{},
		Limits: Limits{MaxInputBytes: DefaultMaxBytes, MaxOutputBytes: DefaultMaxBytes, Growth: DefaultGrowth(), HTTP: DefaultHTTPLimits(),
			ToolTimeout: DefaultToolTimeout, MaxToolTimeout: DefaultMaxToolTimeout},
	}
}

// Load reads the operator's configuration file at path. Every problem is reported at once
// (Problems), each naming the file, line and key.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, Problems{{File: path, Message: "cannot read the operator's configuration: " + errors.Unwrap(err).Error()}}
	}
	return Parse(path, data)
}

// Parse reads an operator's configuration from data; file names it in problems.
func Parse(file string, data []byte) (*Config, error) {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		p := Problem{File: file, Message: "not valid TOML"}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, col := de.Position()
			p.Line, p.Message = line, fmt.Sprintf("not valid TOML at column %d", col)
		}
		return nil, Problems{p}
	}
	l := &loader{file: file, lines: workflow.KeyLines(data)}
	cfg := l.config(doc)
	if len(l.problems) > 0 {
		slices.SortStableFunc(l.problems, func(a, b Problem) int { return a.Line - b.Line })
		return nil, l.problems
	}
	cfg.File = file
	return cfg, nil
}

// loader decodes a document, collecting problems.
type loader struct {
	file     string
	lines    map[string]int
	problems Problems
}

func (l *loader) add(key, format string, args ...any) {
	line := 0
	for k := key; k != ""; {
		if n, ok := l.lines[k]; ok {
			line = n
			break
		}
		i := strings.LastIndexAny(k, ".[")
		if i < 0 {
			break
		}
		k = k[:i]
	}
	l.problems = append(l.problems, Problem{File: l.file, Line: line, Key: key, Message: fmt.Sprintf(format, args...)})
}

func (l *loader) config(doc map[string]any) *Config {
	cfg := Default()
	cfg.Providers, cfg.MCP, cfg.Webhooks = map[string]Provider{}, map[string]MCPServer{}, map[string]Webhook{}
	custom := l.strings("custom_roles", doc["custom_roles"])
	for i, r := range custom {
		if !namePattern.MatchString(r) || slices.Contains(Roles, r) {
			l.add(fmt.Sprintf("custom_roles[%d]", i), "a custom role is a name of [a-z0-9_-] other than a built-in role (%s)", strings.Join(Roles, ", "))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(doc)) {
		v := doc[k]
		switch k {
		case "custom_roles":
		case "providers":
			for name, t := range l.tables(k, v) {
				if p, ok := l.provider(k+"."+name, t); ok {
					cfg.Providers[name] = p
				}
			}
		case "mcp":
			for name, t := range l.tables(k, v) {
				if m, ok := l.mcp(k+"."+name, t); ok {
					cfg.MCP[name] = m
				}
			}
		case "principals":
			for name, t := range l.tables(k, v) {
				if name == "admin" {
					l.add(k+"."+name, "the principal admin is the data directory's (its token is in DATA/admin.token): give the admin role to a principal of another name")
					continue
				}
				if p, ok := l.principal(k+"."+name, name, t, custom); ok {
					cfg.Principals[name] = p
				}
			}
		case "limits":
			l.limits(k, v, &cfg.Limits)
		case "triggers":
			cfg.TriggerSubjects = l.triggers(k, v)
		case "console":
			cfg.TraceURL = l.console(k, v)
		case "webhooks":
			for name, t := range l.tables(k, v) {
				if w, ok := l.webhook(k+"."+name, t); ok {
					cfg.Webhooks[name] = w
				}
			}
		default:
			l.add(k, "unknown key (known: custom_roles, providers, mcp, principals, limits, webhooks, triggers, console)")
		}
	}
	cfg.CustomRoles = custom
	return cfg
}

// tables returns the tables under key (providers.NAME, ...), checking their names.
func (l *loader) tables(key string, v any) map[string]map[string]any {
	m, ok := v.(map[string]any)
	if !ok {
		l.add(key, "want a table of named tables ([%s.NAME])", key)
		return nil
	}
	out := map[string]map[string]any{}
	for name, t := range m {
		tt, ok := t.(map[string]any)
		switch {
		case !namePattern.MatchString(name):
			l.add(key+"."+name, "a name is 1 to 64 characters of [a-z0-9_-]")
		case !ok:
			l.add(key+"."+name, "want a table ([%s.%s])", key, name)
		default:
			out[name] = tt
		}
	}
	return out
}

// keys reports the keys of t that are not in known.
func (l *loader) keys(key string, t map[string]any, known ...string) {
	for k := range t {
		if !slices.Contains(known, k) {
			l.add(key+"."+k, "unknown key (known: %s)", strings.Join(known, ", "))
		}
	}
}

func (l *loader) str(key string, v any) string {
	if v == nil {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		l.add(key, "want a string")
		return ""
	}
	return s
}

func (l *loader) strings(key string, v any) []string {
	if v == nil {
		return nil
	}
	a, ok := v.([]any)
	if !ok {
		l.add(key, "want a list of strings")
		return nil
	}
	out := make([]string, 0, len(a))
	for i, e := range a {
		s, ok := e.(string)
		if !ok {
			l.add(fmt.Sprintf("%s[%d]", key, i), "want a string")
			continue
		}
		out = append(out, s)
	}
	return out
}

func (l *loader) provider(key string, t map[string]any) (Provider, bool) {
	l.keys(key, t, "kind", "base_url", "api_key_env", "api_key_file", "models", "rpm", "tpm", "max_concurrent", "model_limits")
	n := len(l.problems)
	p := Provider{
		Kind: l.str(key+".kind", t["kind"]), BaseURL: l.str(key+".base_url", t["base_url"]),
		APIKeyEnv: l.str(key+".api_key_env", t["api_key_env"]), APIKeyFile: l.str(key+".api_key_file", t["api_key_file"]),
		Models: l.strings(key+".models", t["models"]), Limits: l.rateLimits(key, t),
	}
	p.ModelLimits = l.modelLimits(key+".model_limits", t["model_limits"], p.Models)
	switch {
	case t["kind"] == nil:
		l.add(key+".kind", "missing: want openai or anthropic")
	case officialURL[p.Kind] == "" && len(l.problems) == n:
		l.add(key+".kind", "want openai or anthropic")
	}
	if p.APIKeyEnv != "" && p.APIKeyFile != "" {
		l.add(key+".api_key_file", "set api_key_env or api_key_file, not both")
	}
	if p.BaseURL == "" {
		p.BaseURL = officialURL[p.Kind]
		if p.APIKeyEnv == "" && p.APIKeyFile == "" && t["kind"] != nil {
			l.add(key, "a provider on the official endpoint needs its key: set api_key_env or api_key_file")
		}
	} else if u, err := url.Parse(p.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		l.add(key+".base_url", "want an http(s) URL with a host and no user information")
	}
	if p.APIKeyEnv != "" && !envName(p.APIKeyEnv) {
		l.add(key+".api_key_env", "want the name of an environment variable ([A-Za-z_][A-Za-z0-9_]*)")
	}
	for i, m := range p.Models {
		if strings.TrimSpace(m) == "" {
			l.add(fmt.Sprintf("%s.models[%d]", key, i), "a model name is not empty")
		}
	}
	return p, len(l.problems) == n
}

// rateLimits reads the keys rpm, tpm and max_concurrent of table t at key.
func (l *loader) rateLimits(key string, t map[string]any) RateLimits {
	var r RateLimits
	for k, dst := range map[string]*int64{"rpm": &r.RPM, "tpm": &r.TPM, "max_concurrent": &r.MaxConcurrent} {
		switch x := t[k].(type) {
		case nil:
		case int64:
			if x <= 0 {
				l.add(key+"."+k, "want a whole number of more than 0 (leave the key out for no limit)")
			} else {
				*dst = x
			}
		default:
			l.add(key+"."+k, "want a whole number of more than 0")
		}
	}
	return r
}

// modelLimits reads [PROVIDER.model_limits."MODEL"]: the limits of each model, by name; a
// provider that lists its models may limit only those.
func (l *loader) modelLimits(key string, v any, models []string) map[string]RateLimits {
	if v == nil {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		l.add(key, `want a table of models' limits ([%s."MODEL"])`, key)
		return nil
	}
	out := map[string]RateLimits{}
	for _, name := range slices.Sorted(maps.Keys(m)) {
		mk := key + "." + name
		t, ok := m[name].(map[string]any)
		switch {
		case strings.TrimSpace(name) == "":
			l.add(mk, "a model name is not empty")
			continue
		case !ok:
			l.add(mk, "want a table with rpm, tpm or max_concurrent")
			continue
		case len(models) > 0 && !slices.Contains(models, name):
			// The models are not listed: no problem quotes a value of the file.
			l.add(mk, "the provider's models do not include this model: limit one of the models its key models lists")
			continue
		}
		l.keys(mk, t, "rpm", "tpm", "max_concurrent")
		out[name] = l.rateLimits(mk, t)
	}
	return out
}

func (l *loader) mcp(key string, t map[string]any) (MCPServer, bool) {
	l.keys(key, t, "command", "url")
	n := len(l.problems)
	m := MCPServer{Command: l.strings(key+".command", t["command"]), URL: l.str(key+".url", t["url"])}
	switch {
	case len(m.Command) > 0 && m.URL != "":
		l.add(key, "set command or url, not both")
	case t["command"] != nil && (len(m.Command) == 0 || strings.TrimSpace(m.Command[0]) == ""):
		l.add(key+".command", "want the program and its arguments, the program first")
	case len(m.Command) == 0 && m.URL == "" && len(l.problems) == n:
		l.add(key, "missing: set command (a program started over stdio) or url (a streamable HTTP endpoint)")
	case m.URL != "":
		if u, err := url.Parse(m.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			l.add(key+".url", "want an http(s) URL with a host")
		}
	}
	return m, len(l.problems) == n
}

// triggers reads [triggers]: subjects, the patterns subject triggers may listen on, none of
// which may match reins's own subjects or the server's (workflow.CheckSubject).
func (l *loader) triggers(key string, v any) []string {
	t, ok := v.(map[string]any)
	if !ok {
		l.add(key, "want a table ([triggers])")
		return nil
	}
	l.keys(key, t, "subjects")
	subjects := l.strings(key+".subjects", t["subjects"])
	for i, s := range subjects {
		if err := workflow.CheckSubject(s); err != nil {
			l.add(fmt.Sprintf("%s.subjects[%d]", key, i), "%v", err)
		}
	}
	return subjects
}

// console reads [console]: trace_url, the address of a run's trace in the operator's
// tracing backend, which every viewer of a run is shown.
func (l *loader) console(key string, v any) string {
	t, ok := v.(map[string]any)
	if !ok {
		l.add(key, "want a table ([console])")
		return ""
	}
	l.keys(key, t, "trace_url")
	u := l.str(key+".trace_url", t["trace_url"])
	if err := checkTraceURL(u); u != "" && err != nil {
		l.add(key+".trace_url", "%v", err)
		return ""
	}
	return u
}

// checkTraceURL checks a trace URL template: an absolute http or https URL without
// credentials (every viewer sees it) with {trace_id} where the id goes, and no other braces.
func checkTraceURL(s string) error {
	if !strings.Contains(s, TraceIDPlaceholder) {
		return fmt.Errorf("want a URL with %s where a run's trace id goes, such as http://jaeger:16686/trace/%s", TraceIDPlaceholder, TraceIDPlaceholder)
	}
	filled := strings.ReplaceAll(s, TraceIDPlaceholder, "0af7651916cd43dd8448eb211c80319c")
	if strings.ContainsAny(filled, "{}") {
		return fmt.Errorf("%s is the only placeholder a trace URL may hold", TraceIDPlaceholder)
	}
	u, err := url.Parse(filled)
	switch {
	case err != nil:
		return fmt.Errorf("not a URL: %w", err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return errors.New("want an absolute http or https URL")
	case u.User != nil:
		return errors.New("a trace URL must not carry credentials: every viewer of a run is shown it")
	}
	return nil
}

func (l *loader) webhook(key string, t map[string]any) (Webhook, bool) {
	l.keys(key, t, "secret_env", "secret_file")
	n := len(l.problems)
	w := Webhook{SecretEnv: l.str(key+".secret_env", t["secret_env"]), SecretFile: l.str(key+".secret_file", t["secret_file"])}
	switch {
	case w.SecretEnv != "" && w.SecretFile != "":
		l.add(key, "set secret_env or secret_file, not both")
	case w.SecretEnv == "" && w.SecretFile == "" && len(l.problems) == n:
		l.add(key, "missing a secret: set secret_env (an environment variable holding it) or secret_file (a file holding it)")
	case w.SecretEnv != "" && !envName(w.SecretEnv):
		l.add(key+".secret_env", "want the name of an environment variable ([A-Za-z_][A-Za-z0-9_]*)")
	}
	return w, len(l.problems) == n
}

func (l *loader) principal(key, name string, t map[string]any, custom []string) (Principal, bool) {
	l.keys(key, t, "token_env", "token_sha256", "roles")
	n := len(l.problems)
	p := Principal{Name: name, TokenEnv: l.str(key+".token_env", t["token_env"]), TokenSHA256: l.str(key+".token_sha256", t["token_sha256"]),
		Roles: l.strings(key+".roles", t["roles"])}
	switch field, problem := tokenProblem(p, "token_env", "token_sha256"); {
	case problem == "":
	case p.TokenEnv == "" && p.TokenSHA256 == "" && len(l.problems) > n:
		// a token key of the wrong type, said already
	case field != "":
		l.add(key+"."+field, "%s", problem)
	default:
		l.add(key, "%s", problem)
	}
	p.TokenSHA256 = strings.ToLower(p.TokenSHA256)
	builtin := false
	for i, r := range p.Roles {
		switch {
		case slices.Contains(Roles, r):
			builtin = true
		case slices.Contains(custom, r):
		default:
			l.add(fmt.Sprintf("%s.roles[%d]", key, i), "unknown role %q (known: %s; custom_roles declares others)", r, strings.Join(Roles, ", "))
		}
	}
	if !builtin && t["roles"] != nil && len(l.problems) == n {
		l.add(key+".roles", "name at least one built-in role (%s): a custom role grants nothing by itself", strings.Join(Roles, ", "))
	} else if t["roles"] == nil {
		l.add(key+".roles", "missing: name the principal's roles (%s)", strings.Join(Roles, ", "))
	}
	return p, len(l.problems) == n
}

var sha256Hex = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)

// tokenProblem says what is wrong with where p's token comes from, naming its two sources
// envKey and shaKey as the caller's input names them (a file's keys, a Go field's names): the
// source at fault ("" for the principal as a whole) and the problem, or "" when nothing is.
func tokenProblem(p Principal, envKey, shaKey string) (field, problem string) {
	switch {
	case p.TokenEnv != "" && p.TokenSHA256 != "":
		return "", fmt.Sprintf("set %s or %s, not both", envKey, shaKey)
	case p.TokenEnv == "" && p.TokenSHA256 == "":
		return "", fmt.Sprintf("missing a token: set %s (an environment variable holding it) or %s (the hex SHA-256 of it)", envKey, shaKey)
	case p.TokenEnv != "" && !envName(p.TokenEnv):
		return envKey, "want the name of an environment variable ([A-Za-z_][A-Za-z0-9_]*)"
	case p.TokenSHA256 != "" && !sha256Hex.MatchString(p.TokenSHA256):
		return shaKey, "want 64 hexadecimal characters: the SHA-256 of the token"
	}
	return "", ""
}

func envName(s string) bool {
	for i, c := range s {
		if !(c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return s != ""
}

func (l *loader) limits(key string, v any, lim *Limits) {
	t, ok := v.(map[string]any)
	if !ok {
		l.add(key, "want a table ([limits])")
		return
	}
	l.keys(key, t, slices.Concat([]string{"max_input_bytes", "max_output_bytes"}, growthKeys, httpLimitKeys, []string{"max_consumers_per_principal"}, toolTimeoutKeys)...)
	l.toolTimeouts(key, t, lim)
	l.consumersCap(key+".max_consumers_per_principal", t["max_consumers_per_principal"], lim)
	l.growth(key, t, &lim.Growth)
	l.httpLimits(key, t, &lim.HTTP) // the HTTP listener's keys (httplimits.go)
	for k, dst := range map[string]*int64{"max_input_bytes": &lim.MaxInputBytes, "max_output_bytes": &lim.MaxOutputBytes} {
		switch x := t[k].(type) {
		case nil:
		case int64:
			if x <= 0 {
				l.add(key+"."+k, "want a size of more than 0 bytes")
			} else {
				*dst = x
			}
		case string:
			n, err := ParseBytes(x)
			if err != nil {
				l.add(key+"."+k, "%v", err)
			} else {
				*dst = n
			}
		default:
			l.add(key+"."+k, `want a size: a number of bytes, or a string such as "64MiB"`)
		}
	}
}

// consumersCap reads [limits] max_consumers_per_principal: a whole number of consumers.
func (l *loader) consumersCap(key string, v any, lim *Limits) {
	switch x := v.(type) {
	case nil:
	case int64:
		if x < 1 || x > MaxConsumersCap {
			l.add(key, "want a whole number of consumers from 1 to %d", MaxConsumersCap)
			return
		}
		lim.MaxConsumersPerPrincipal = int(x)
	default:
		l.add(key, "want a whole number of consumers, such as 64")
	}
}

// ParseBytes reads a size: digits and an optional unit, B, KB, MB, GB (powers of 1000) or KiB,
// MiB, GiB (powers of 1024); more than 0.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return r < '0' || r > '9' })
	digits, unit := t, ""
	if i >= 0 {
		digits, unit = t[:i], strings.TrimSpace(t[i:])
	}
	mult := map[string]int64{"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
	n, err := strconv.ParseInt(digits, 10, 64)
	switch {
	case digits == "" || err != nil || mult == 0:
		return 0, errors.New(`want a size: digits and an optional unit (B, KB, MB, GB, KiB, MiB, GiB), such as "64MiB"`)
	case n <= 0:
		return 0, errors.New("want a size of more than 0 bytes")
	case n > (1<<62)/mult:
		return 0, errors.New("the size is too large")
	}
	return n * mult, nil
}
