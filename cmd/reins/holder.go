package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/operator"
)

// One terminal or two (docs/deploy.md, "Several terminals on one data directory"): the process that
// runs the embedded server of a data directory (reins serve, reins run, approve, deny, resume,
// signal, runs fork) listens on 127.0.0.1 and records its client URL in DATA/nats.url; another
// command on the same directory finds the lock taken and connects to that URL as the data
// directory's admin (DATA/admin.token) instead of failing. A file left by a process killed
// with SIGKILL is ignored: its lock is free, so the next command runs the server itself.

// urlFile is the file in the data directory where the process that runs its embedded server
// records the server's client URL, so that other commands on the same data directory connect
// to it. Its first line is the URL; a second line holdsRun says the process is a reins command
// running its own runs (reins run), not a server (reins serve).
const urlFile = "nats.url"

// holdsRun is the second line of urlFile written by a reins command that runs the engine for
// itself: its workers take a workflow's own providers and MCP servers, as reins run does.
const holdsRun = "reins run"

// anyLoopback is where a command that runs the embedded server listens when given no --listen:
// a free port on 127.0.0.1, which only the data directory's admin may use.
const anyLoopback = "127.0.0.1:0"

// holderWait bounds how long a command waits for the process that holds a data directory to
// record its URL, or to let the directory go: one starting, or a short command (runs list)
// that does not listen.
var holderWait = 5 * time.Second

// holderPoll is how often that wait tries again.
const holderPoll = 50 * time.Millisecond

// errNoHolder marks why a held data directory could not be reached yet: no URL recorded, or
// a URL nobody answers at. Trying again may succeed.
var errNoHolder = errors.New("no server to connect to")

// holder is what a data directory's urlFile says.
type holder struct {
	url string
	run bool // the process is a reins command running its own runs (holdsRun)
}

// readHolder reads the urlFile of data; ok false when there is none (or it is empty).
func readHolder(data string) (h holder, ok bool) {
	raw, err := os.ReadFile(filepath.Join(data, urlFile))
	if err != nil {
		return holder{}, false
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	h.url = strings.TrimSpace(lines[0])
	h.run = len(lines) > 1 && strings.TrimSpace(lines[1]) == holdsRun
	return h, h.url != ""
}

// recordHolder writes h as the urlFile of data, whole or not at all (a temporary file renamed),
// mode 0600. remove deletes it, unless another process has recorded its own since: it is
// called before the server stops, while this process still holds the directory.
func recordHolder(data string, h holder) (remove func(), err error) {
	if h.url == "" {
		return func() {}, nil
	}
	content := h.url + "\n"
	if h.run {
		content += holdsRun + "\n"
	}
	path := filepath.Join(data, urlFile)
	tmp, err := os.CreateTemp(data, "."+urlFile+"-*")
	if err != nil {
		return nil, fmt.Errorf("record the server's URL in %s: %w", path, err)
	}
	_, werr := tmp.WriteString(content)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp.Name(), 0o600)
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return nil, fmt.Errorf("record the server's URL in %s: %w", path, werr)
	}
	return func() {
		if now, ok := readHolder(data); ok && now.url == h.url {
			_ = os.Remove(path)
		}
	}, nil
}

// openData opens the embedded server of the data directory; while another process holds the
// directory, it connects to the server that process records instead (openHolder). A holder
// still starting, or a short command that records none, is waited for up to holderWait.
func (f *natsFlags) openData(ctx context.Context, opts natsbox.Options) (*natsbox.Box, error) {
	giveUp := time.NewTimer(holderWait)
	defer giveUp.Stop()
	for {
		box, err := natsbox.Open(ctx, opts)
		if !errors.Is(err, natsbox.ErrDataDirLocked) {
			return box, err
		}
		box, err = f.openHolder(ctx, opts)
		if !errors.Is(err, errNoHolder) {
			return box, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-giveUp.C:
			return nil, err
		case <-time.After(holderPoll):
		}
	}
}

// openHolder connects to the server recorded in the data directory, with the token given,
// else the data directory's admin's.
func (f *natsFlags) openHolder(ctx context.Context, opts natsbox.Options) (*natsbox.Box, error) {
	h, ok := readHolder(f.data)
	if !ok {
		return nil, fmt.Errorf("the data directory %s is in use by another reins process, which records no server in %s (a command that ends soon, such as reins runs list): %w; run the command again when it ends, or pass --nats URL",
			f.data, filepath.Join(f.data, urlFile), errNoHolder)
	}
	token := f.clientToken()
	if token == "" {
		var err error
		if token, err = operator.ReadAdminToken(f.data); err != nil {
			return nil, err
		}
	}
	opts.DataDir, opts.Listen, opts.Authenticate, opts.URL, opts.Token = "", "", nil, h.url, token
	opts.MaxConsumersPerPrincipal = 0
	box, err := natsbox.Open(ctx, opts)
	switch {
	case err == nil:
		return box, nil
	case errors.Is(err, natsbox.ErrAuth) || errors.Is(err, context.Canceled):
		return nil, err
	}
	// A URL left by a process that died, while another one starts: try again.
	return nil, fmt.Errorf("the data directory %s is in use by another reins process, and the server recorded in %s (%s) does not answer: %w (%w)",
		f.data, filepath.Join(f.data, urlFile), h.url, errNoHolder, err)
}

// openURL connects to the server of --nats. With no credentials given, on the server's
// machine, it uses the admin token of the data directory whose server that is (--data: its
// urlFile names the same server), and a refusal says what to give.
func (f *natsFlags) openURL(ctx context.Context, opts natsbox.Options) (*natsbox.Box, error) {
	opts.Token = f.clientToken()
	anonymous := opts.Token == "" && f.creds == "" && f.nkey == ""
	why := ""
	if anonymous {
		opts.Token, why = f.dataToken(opts.URL)
	}
	box, err := natsbox.Open(ctx, opts)
	if err == nil || !anonymous || !errors.Is(err, natsbox.ErrAuth) {
		return box, err
	}
	shown := natsbox.RedactURL(opts.URL)
	if opts.Token != "" {
		return nil, fmt.Errorf("%w at %s: it does not know the admin token of --data %s: pass --token (or set $%s)", natsbox.ErrAuth, shown, f.data, tokenEnv)
	}
	return nil, fmt.Errorf("%w at %s: it requires credentials: pass --token (or set $%s), or, on the server's machine, --data DIR, the data directory of its reins serve (%s)", natsbox.ErrAuth, shown, tokenEnv, why)
}

// dataToken returns the admin token of --data when the data directory records the server of
// urls (one of them), else "" and why not, for the error that follows a refusal.
func (f *natsFlags) dataToken(urls string) (token, why string) {
	h, ok := readHolder(f.data)
	if !ok {
		return "", fmt.Sprintf("--data %s records no server on this machine: no %s", f.data, filepath.Join(f.data, urlFile))
	}
	same := false
	for _, u := range strings.Split(urls, ",") {
		same = same || sameServer(u, h.url)
	}
	if !same {
		return "", fmt.Sprintf("--data %s records the server %s, not this one", f.data, natsbox.RedactURL(h.url))
	}
	token, err := operator.ReadAdminToken(f.data)
	if err != nil {
		return "", err.Error()
	}
	return token, ""
}

// sameServer says whether two NATS URLs name the same loopback server: the same port on
// 127.0.0.1, ::1 or localhost. The admin token is never sent to another host.
func sameServer(a, b string) bool {
	ha, pa, oka := loopbackPort(a)
	hb, pb, okb := loopbackPort(b)
	return oka && okb && pa == pb && (ha == hb || ha == "localhost" || hb == "localhost")
}

// loopbackPort is the host and port of NATS URL u when its host is a loopback one (the
// default port 4222 when none is given).
func loopbackPort(u string) (host, port string, ok bool) {
	u = strings.TrimSpace(u)
	if !strings.Contains(u, "://") {
		u = "nats://" + u
	}
	p, err := url.Parse(u)
	if err != nil || p.User != nil {
		return "", "", false
	}
	host, port = p.Hostname(), p.Port()
	if port == "" {
		port = "4222"
	}
	if host == "localhost" {
		return host, port, true
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return "", "", false
	}
	return ip.String(), port, true
}

// workersElsewhere refuses the flags that configure this command's built-in workers when the
// run goes to another process's (the server of --nats, or the command holding --data): they
// would be ignored, and the run would use that process's models. --model NAME of the workflow's
// [models] only picks among the definition's models and goes with the run; --model
// PROVIDER:NAME is a model these workers would open with this command's keys and endpoints.
func (f *runFlags) workersElsewhere(cmd *cobra.Command) error {
	where, advice := "the server of --nats "+natsbox.RedactURL(f.nats.url), "run without --nats"
	if f.nats.url == "" {
		where, advice = "the reins process holding --data "+f.nats.data, "use another --data"
	}
	if f.provider != "" {
		return &exitError{code: exitUsage, err: fmt.Errorf("--model %s is a model for the built-in workers of this command to open with its keys, but the run goes to those of %s, which open the workflow's own models with theirs: declare it in the workflow's [models] and give --model NAME, or %s", f.provider, where, advice)}
	}
	for _, name := range []string{"base-url", "api-key", "timeout", "record", "price"} {
		if !cmd.Flags().Changed(name) {
			continue
		}
		what := "give it to that server's reins serve, or " + advice
		if f.nats.url == "" {
			what = "give it to that command, or " + advice
		}
		return &exitError{code: exitUsage, err: fmt.Errorf("--%s configures the built-in workers of this command, but the run goes to those of %s: %s", name, where, what)}
	}
	return nil
}
