package operator

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Resolved is a configuration with the credentials it references read: the keys of providers,
// the tokens of principals (kept as SHA-256 hashes). It never prints a secret: String,
// GoString and LogValue show names only.
type Resolved struct {
	cfg    *Config
	keys   map[string]string // provider → key ("" when it has none)
	missed map[string]string // provider → why it has no key (a default provider whose variable is unset)
	tokens map[string][32]byte
	byName map[string]Principal
	hooks  map[string][]byte // webhook → secret
}

// Resolve reads every credential cfg references (nil getenv and readFile: the process's
// environment and files). A loaded configuration that names an unset or empty variable, or a
// file that cannot be read, fails with one sentence naming the key and the variable or file,
// never the value.
func (cfg *Config) Resolve(getenv func(string) string, readFile func(string) ([]byte, error)) (*Resolved, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if readFile == nil {
		readFile = os.ReadFile
	}
	r := &Resolved{cfg: cfg, keys: map[string]string{}, missed: map[string]string{}, tokens: map[string][32]byte{}, byName: map[string]Principal{}, hooks: map[string][]byte{}}
	var errs []string
	where := func(key string) string {
		if cfg.File == "" {
			return "key " + key
		}
		return cfg.File + ": key " + key
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Providers)) {
		p := cfg.Providers[name]
		key := "providers." + name
		switch {
		case p.APIKeyEnv != "":
			v := strings.TrimSpace(getenv(p.APIKeyEnv))
			if v == "" && p.optional {
				r.missed[name] = fmt.Sprintf("provider %s has no key: set %s", name, p.APIKeyEnv)
			} else if v == "" {
				errs = append(errs, fmt.Sprintf("%s.api_key_env: the environment variable %s is not set", where(key), p.APIKeyEnv))
			}
			r.keys[name] = v
		case p.APIKeyFile != "":
			data, err := readFile(p.APIKeyFile)
			v := string(bytes.TrimSpace(data))
			if err != nil || v == "" {
				errs = append(errs, fmt.Sprintf("%s.api_key_file: the file %s %s", where(key), p.APIKeyFile, fileProblem(err)))
			}
			r.keys[name] = v
		default:
			r.keys[name] = ""
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Principals)) {
		p := cfg.Principals[name]
		key := "principals." + name
		switch {
		case p.TokenEnv != "":
			v := strings.TrimSpace(getenv(p.TokenEnv))
			if v == "" {
				errs = append(errs, fmt.Sprintf("%s.token_env: the environment variable %s is not set", where(key), p.TokenEnv))
				continue
			}
			r.tokens[name] = sha256.Sum256([]byte(v))
		default:
			var h [32]byte
			if _, err := hex.Decode(h[:], []byte(p.TokenSHA256)); err != nil {
				errs = append(errs, fmt.Sprintf("%s.token_sha256: want 64 hexadecimal characters", where(key)))
				continue
			}
			r.tokens[name] = h
		}
		r.byName[name] = p
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Webhooks)) {
		w := cfg.Webhooks[name]
		key := "webhooks." + name
		switch {
		case w.SecretEnv != "":
			v := strings.TrimSpace(getenv(w.SecretEnv))
			if v == "" {
				errs = append(errs, fmt.Sprintf("%s.secret_env: the environment variable %s is not set", where(key), w.SecretEnv))
				continue
			}
			r.hooks[name] = []byte(v)
		case w.SecretFile != "":
			data, err := readFile(w.SecretFile)
			v := bytes.TrimSpace(data)
			if err != nil || len(v) == 0 {
				errs = append(errs, fmt.Sprintf("%s.secret_file: the file %s %s", where(key), w.SecretFile, fileProblem(err)))
				continue
			}
			r.hooks[name] = v
		}
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "\n"))
	}
	return r, nil
}

// fileProblem says in a few words why a credential file gave nothing, without its contents.
func fileProblem(err error) string {
	switch {
	case err == nil:
		return "is empty"
	case errors.Is(err, fs.ErrNotExist):
		return "does not exist"
	case errors.Is(err, fs.ErrPermission):
		return "cannot be read (permission denied)"
	}
	return "cannot be read"
}

// Config returns the configuration r resolves.
func (r *Resolved) Config() *Config { return r.cfg }

// Provider returns the provider called name.
func (r *Resolved) Provider(name string) (Provider, bool) {
	p, ok := r.cfg.Providers[name]
	return p, ok
}

// MCPServer returns the MCP server called name.
func (r *Resolved) MCPServer(name string) (MCPServer, bool) {
	m, ok := r.cfg.MCP[name]
	return m, ok
}

// MCPServers returns the names of the MCP servers, sorted.
func (r *Resolved) MCPServers() []string { return slices.Sorted(maps.Keys(r.cfg.MCP)) }

// APIKey returns the key the operator paired with provider name ("" for one configured
// without a key, a local server).
func (r *Resolved) APIKey(name string) (string, error) {
	if why := r.missed[name]; why != "" {
		return "", errors.New(why)
	}
	k, ok := r.keys[name]
	if !ok {
		return "", fmt.Errorf("there is no provider %s in the operator's configuration", name)
	}
	return k, nil
}

// Secrets returns every credential r resolved whose value the server holds: the providers'
// keys and the webhooks' secrets (principals' tokens are kept only as hashes). A server's
// built-in workers hide them in every value they store.
func (r *Resolved) Secrets() []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(r.keys)) {
		if k := r.keys[name]; k != "" {
			out = append(out, k)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.hooks)) {
		if s := r.hooks[name]; len(s) > 0 {
			out = append(out, string(s))
		}
	}
	return out
}

// AddPrincipal makes token identify principal name with roles (the data directory's admin).
func (r *Resolved) AddPrincipal(name, token string, roles ...string) {
	r.tokens[name] = sha256.Sum256([]byte(token))
	r.byName[name] = Principal{Name: name, Roles: slices.Clone(roles)}
}

// Authenticate returns the principal token identifies. It compares the token's hash with every
// principal's in constant time, whether or not one matched before.
func (r *Resolved) Authenticate(token string) (Principal, bool) {
	if token == "" {
		return Principal{}, false
	}
	h := sha256.Sum256([]byte(token))
	found := ""
	for _, name := range slices.Sorted(maps.Keys(r.tokens)) {
		want := r.tokens[name]
		if subtle.ConstantTimeCompare(h[:], want[:]) == 1 {
			found = name
		}
	}
	if found == "" {
		return Principal{}, false
	}
	return r.byName[found], true
}

// WebhookSecret returns the secret that signs the deliveries of webhook name; false when the
// operator opened no such hook. The caller verifies with it and never shows it.
func (r *Resolved) WebhookSecret(name string) ([]byte, bool) {
	s, ok := r.hooks[name]
	return s, ok && len(s) > 0
}

// Principal returns the principal called name.
func (r *Resolved) Principal(name string) (Principal, bool) {
	p, ok := r.byName[name]
	return p, ok
}

// Has reports whether p holds role.
func (p Principal) Has(role string) bool { return slices.Contains(p.Roles, role) }

// MayRead reports whether p may read runs: a viewer, submitter, approver or admin (the API's
// read routes and the MCP server's resources and tasks).
func (p Principal) MayRead() bool {
	return p.Has(RoleAdmin) || p.Has(RoleViewer) || p.Has(RoleSubmitter) || p.Has(RoleApprover)
}

// MayStart reports whether p may start runs: a submitter or an admin.
func (p Principal) MayStart() bool { return p.Has(RoleAdmin) || p.Has(RoleSubmitter) }

// String names what r holds, never a secret.
func (r *Resolved) String() string {
	return fmt.Sprintf("operator configuration %q: providers %v, MCP servers %v, principals %v",
		r.cfg.File, slices.Sorted(maps.Keys(r.cfg.Providers)), slices.Sorted(maps.Keys(r.cfg.MCP)), slices.Sorted(maps.Keys(r.byName)))
}

// GoString is String, so that %#v shows no secret either.
func (r *Resolved) GoString() string { return r.String() }

// LogValue is String, for slog.
func (r *Resolved) LogValue() slog.Value { return slog.StringValue(r.String()) }

// AdminTokenFile is the file of a data directory holding its admin's token.
const AdminTokenFile = "admin.token"

// AdminToken returns the data directory's admin token, creating it (32 random bytes, mode
// 0600) at the first call. Two processes that race both get the winner's: the token is written
// whole to a file of its own, then linked into place only if no token is there yet, so that no
// reader ever sees a half-written one.
func AdminToken(dataDir string) (string, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("create the data directory %s: %w", dataDir, err)
	}
	path := filepath.Join(dataDir, AdminTokenFile)
	if _, err := os.Stat(path); err == nil {
		return ReadAdminToken(dataDir)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	token := "reins_" + hex.EncodeToString(b)
	tmp, err := os.CreateTemp(dataDir, ".admin.token-*")
	if err != nil {
		return "", fmt.Errorf("create the admin token in %s: %w", dataDir, err)
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.WriteString(token + "\n")
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp.Name(), 0o600)
	}
	if werr != nil {
		return "", fmt.Errorf("write the admin token %s: %w", path, werr)
	}
	switch err := os.Link(tmp.Name(), path); {
	case errors.Is(err, fs.ErrExist):
		return ReadAdminToken(dataDir)
	case err != nil:
		return "", fmt.Errorf("create the admin token %s: %w", path, err)
	}
	return token, nil
}

// ReadAdminToken reads the data directory's admin token, refusing a file others may read.
func ReadAdminToken(dataDir string) (string, error) {
	path := filepath.Join(dataDir, AdminTokenFile)
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("the data directory %s has no admin token (%s): start reins serve or reins run on it first, or pass --token", dataDir, path)
	}
	if err != nil {
		return "", fmt.Errorf("the admin token %s: %w", path, err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("the admin token %s may be read by others (mode %#o): chmod 600 it", path, info.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("the admin token %s %s", path, fileProblem(err))
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("the admin token %s is empty", path)
	}
	return token, nil
}
