package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	_ "github.com/reins-run/reins/internal/natsbox/embed" // Open starts embedded servers
)

// natsFlags choose the NATS server of a command: an embedded one in a data directory (the
// default), or an external one with --nats.
type natsFlags struct {
	url, creds, nkey    string
	tlsCert, tlsKey, ca string
	data                string
	token               string
	// server is --server (default $REINS_SERVER): the command goes through that server's
	// HTTP API instead of NATS (remote.go).
	server string
	// namespace is --namespace (default $REINS_NAMESPACE): the prefix of every subject,
	// stream and bucket (natsbox.NewNames).
	namespace string
	// jsDomain and jsAPIPrefix are --js-domain and --js-api-prefix: where the JetStream of
	// --nats is (natsbox.Options.JSDomain, JSAPIPrefix).
	jsDomain, jsAPIPrefix string
	// replicas is --replicas (serve and worker): the layout's replicas (natsbox.Options).
	replicas int
	// auth judges the tokens of other processes when this command runs the embedded server
	// and listens (serve, run --listen); nil lets none in. maxConsumers caps the consumers each
	// of them holds ([limits] max_consumers_per_principal; 0: natsbox's default).
	auth         natsbox.Authenticator
	maxConsumers int
}

// tokenEnv is the environment variable of a client's token (docs/reference/server.md).
const tokenEnv = "REINS_TOKEN"

// namespaceEnv is the environment variable of --namespace's default, so that a tenant's shell
// names its namespace once.
const namespaceEnv = "REINS_NAMESPACE"

func (f *natsFlags) add(cmd *cobra.Command) { f.addTo(cmd.Flags()) }

func (f *natsFlags) addTo(fl *pflag.FlagSet) { f.addNamed(fl, "data") }

// addNamed adds the flags with the data directory's flag named dataFlag (reins signal keeps
// --data for the event's data, and names it --data-dir).
func (f *natsFlags) addNamed(fl *pflag.FlagSet, dataFlag string) {
	fl.StringVar(&f.url, "nats", "", "an external NATS `URL` (comma-separated for a cluster); default: an embedded server in --"+dataFlag)
	fl.StringVar(&f.data, dataFlag, ".reins", "the data `DIR` of the embedded server")
	fl.StringVar(&f.creds, "nats-creds", "", "a NATS user credentials `FILE` (external server)")
	fl.StringVar(&f.nkey, "nats-nkey", "", "a `FILE` holding an NKey seed (external server)")
	fl.StringVar(&f.tlsCert, "nats-tls-cert", "", "a client certificate `FILE` (external server)")
	fl.StringVar(&f.tlsKey, "nats-tls-key", "", "the client certificate's key `FILE` (external server)")
	fl.StringVar(&f.ca, "nats-tls-ca", "", "a `FILE` of CA certificates the external server's certificate must chain to")
	fl.StringVar(&f.namespace, "namespace", "", "the `NAME` prefixing every subject, stream and bucket, so that deployments share a NATS server without seeing each other (default $"+namespaceEnv+"; none: the default namespace)")
	fl.StringVar(&f.jsDomain, "js-domain", "", "the JetStream domain `NAME` whose JetStream to use, e.g. a hub's from a leaf node with its own (with --nats)")
	fl.StringVar(&f.jsAPIPrefix, "js-api-prefix", "", "the `PREFIX` under which the account imports another account's JetStream API (with --nats)")
	fl.StringVar(&f.token, "token", "", "the `TOKEN` that identifies you to the server (default $"+tokenEnv+"; on the server's machine, --"+dataFlag+" finds the admin's)")
}

// addReplicas adds --replicas, for the commands that create the layout on a cluster.
func (f *natsFlags) addReplicas(cmd *cobra.Command) {
	cmd.Flags().IntVar(&f.replicas, "replicas", 0, "copies of every stream and bucket on a NATS cluster (`N`); default: what exists, 1 when new; never lowers what exists")
}

// clientToken is --token, else $REINS_TOKEN.
func (f *natsFlags) clientToken() string {
	if f.token != "" {
		return f.token
	}
	return strings.TrimSpace(os.Getenv(tokenEnv))
}

// names returns the namespace's names: --namespace, else $REINS_NAMESPACE. A bad name is a
// usage error.
func (f *natsFlags) names() (natsbox.Names, error) {
	ns := f.namespace
	if ns == "" {
		ns = strings.TrimSpace(os.Getenv(namespaceEnv))
	}
	n, err := natsbox.NewNames(ns)
	if err != nil {
		return natsbox.Names{}, &exitError{code: exitUsage, err: fmt.Errorf("--namespace: %w", err)}
	}
	return n, nil
}

// checkJS checks --js-domain and --js-api-prefix: for --nats only, exclusive and well formed;
// anything else is a usage error.
func (f *natsFlags) checkJS() error {
	flag := "--js-domain"
	if f.jsDomain == "" {
		flag = "--js-api-prefix"
	}
	switch {
	case f.jsDomain == "" && f.jsAPIPrefix == "":
		return nil
	case f.url == "":
		return &exitError{code: exitUsage, err: fmt.Errorf("%s applies to an external server: pass --nats URL too", flag)}
	case f.jsDomain != "" && f.jsAPIPrefix != "":
		return &exitError{code: exitUsage, err: errors.New("--js-domain and --js-api-prefix are exclusive: pass one of them")}
	}
	if _, err := natsbox.NewAPI(f.jsDomain, f.jsAPIPrefix); err != nil {
		return &exitError{code: exitUsage, err: fmt.Errorf("%s: %w", flag, err)}
	}
	return nil
}

// asExit is err as the exit error it carries, else as one with status code: a usage error
// found while opening NATS stays one.
func asExit(err error, code int) *exitError {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee
	}
	return &exitError{code: code, err: err}
}

// namespaceAttr is the namespace of box as log attributes: none for the default namespace, so
// that a default deployment logs what it always did.
func namespaceAttr(box *natsbox.Box) []any {
	if ns := box.Names().Namespace(); ns != "" {
		return []any{"namespace", ns}
	}
	return nil
}

// open opens the server the flags name. Embedded, with listen "" (in-process) unless given; when
// another process (reins serve, reins run) holds the data directory, it connects to the server
// that process records (openData); Box.Embedded says which of the two happened. With --nats, it
// connects to that server (openURL).
func (f *natsFlags) open(ctx context.Context, listen string, log *slog.Logger) (*natsbox.Box, error) {
	names, err := f.names()
	if err != nil {
		return nil, err
	}
	if err := f.checkJS(); err != nil {
		return nil, err
	}
	opts := natsbox.Options{
		URL: f.url, CredsFile: f.creds, NKeyFile: f.nkey, TLSCert: f.tlsCert, TLSKey: f.tlsKey, TLSCA: f.ca, Logger: log,
		Replicas: f.replicas, Namespace: names.Namespace(), JSDomain: f.jsDomain, JSAPIPrefix: f.jsAPIPrefix,
	}
	if f.url != "" {
		return f.openURL(ctx, opts)
	}
	opts.DataDir, opts.Listen, opts.Authenticate = f.data, listen, f.auth
	if f.auth != nil {
		opts.MaxConsumersPerPrincipal = f.maxConsumers
	}
	return f.openData(ctx, opts)
}

// newClient returns a client acting as the principal box's connection authenticated as: the
// data directory's admin on an embedded server of this process, else the name the server
// gives (natsbox.Box.WhoAmI), with what it may publish.
func newClient(ctx context.Context, box *natsbox.Box) (*client.Client, error) {
	cfg := client.Config{Conn: (*conn.Conn)(box)}
	if box.Embedded() {
		return client.New(cfg), nil
	}
	name, publish, err := box.WhoAmI(ctx)
	if err != nil {
		return nil, err
	}
	if name != "" && natsbox.CheckToken(name) == nil {
		cfg.Principal = name
	}
	if publish != nil {
		cfg.May = func(subject string) bool {
			return slices.ContainsFunc(publish, func(p string) bool { return natsbox.SubjectMatches(p, subject) })
		}
	}
	return client.New(cfg), nil
}

// writeURL records url, the client URL of an embedded server that listens, for other commands
// ("": it does not listen, nothing is written); remove deletes it.
func (f *natsFlags) writeURL(url string) (remove func(), err error) {
	return recordHolder(f.data, holder{url: url})
}
