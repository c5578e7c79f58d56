// Package conn is a program's connection to the NATS server of a reins deployment: Dial reaches
// a server (`reins serve`'s embedded one at its listen address, or an external server or
// cluster) as one principal, in one namespace. It is the type every public package that talks
// to reins over NATS is built on: package client (which Dial wraps), worker, trigger, host and
// api take a *Conn.
//
// It owns the options of a connection (the token, credentials or NKey seed, TLS, namespace,
// JetStream domain). It must not know runs, tasks or workflows: the packages above it speak
// the protocol over it. It links no NATS server.
package conn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/reins-run/reins/internal/natsbox"
)

// Conn is one NATS connection to a reins deployment. A program gets one from Dial; a program
// that embeds reins (package reins) makes its own. Its methods are safe for concurrent use.
//
// It is natsbox's connection under a name of its own, so that packages of reins reach the
// connection's internals by conversion while programs see only its methods.
type Conn natsbox.Box

// Options configure Dial; each [Option] sets one. The zero value connects without credentials
// to the default namespace.
type Options struct {
	// Token is the principal's token (`reins serve`'s embedded server always requires one).
	Token string
	// CredsFile (a JWT and seed) or NKeyFile (a seed) authenticate to an external server.
	CredsFile, NKeyFile string
	// TLSCert and TLSKey are a client certificate and its key (both or neither); TLSCA is a
	// file of CA certificates the server's certificate must chain to.
	TLSCert, TLSKey, TLSCA string
	// Name is the connection's name as the server shows it; "" means "reins".
	Name string
	// Namespace is the deployment's namespace: every stream, bucket and subject is prefixed by
	// it. "" is the default namespace.
	Namespace string
	// JSDomain or JSAPIPrefix (exclusive) says where the server's JetStream is: in another
	// JetStream domain (a leaf node reaching its hub's), or another account's API imported
	// under a prefix.
	JSDomain, JSAPIPrefix string
	// Logger receives the connection's events (disconnected, reconnected, closed); nil
	// discards them.
	Logger *slog.Logger
}

// Option sets one of the [Options] of Dial, in the style of nats.go's options.
type Option func(*Options)

// Token authenticates with a principal's token.
func Token(token string) Option { return func(o *Options) { o.Token = token } }

// UserCredentials authenticates with a credentials file (a JWT and an NKey seed).
func UserCredentials(file string) Option { return func(o *Options) { o.CredsFile = file } }

// NKey authenticates with a file holding an NKey user seed.
func NKey(seedFile string) Option { return func(o *Options) { o.NKeyFile = seedFile } }

// TLS presents a client certificate and key (both or neither: "" for none) and trusts the CA
// certificates of caFile ("" for the system's).
func TLS(certFile, keyFile, caFile string) Option {
	return func(o *Options) { o.TLSCert, o.TLSKey, o.TLSCA = certFile, keyFile, caFile }
}

// Namespace uses the deployment's namespace ns.
func Namespace(ns string) Option { return func(o *Options) { o.Namespace = ns } }

// Name names the connection as the server shows it.
func Name(name string) Option { return func(o *Options) { o.Name = name } }

// JSDomain reaches the JetStream of domain (a leaf node's hub).
func JSDomain(domain string) Option { return func(o *Options) { o.JSDomain = domain } }

// JSAPIPrefix reaches the JetStream API another account exports, imported under prefix.
func JSAPIPrefix(prefix string) Option { return func(o *Options) { o.JSAPIPrefix = prefix } }

// Logger logs the connection's events to log.
func Logger(log *slog.Logger) Option { return func(o *Options) { o.Logger = log } }

// WithOptions sets every option at once from o.
func WithOptions(o Options) Option { return func(dst *Options) { *dst = o } }

// Dial connects to the server(s) url names (comma-separated, nats://host:4222) with opts.
// ctx bounds the dial. A server that cannot be reached, or that refuses the credentials, is
// one error naming the URL with any user information hidden.
func Dial(ctx context.Context, url string, opts ...Option) (*Conn, error) {
	if url == "" {
		return nil, errors.New("conn: the URL is empty: name the NATS server of the deployment (nats://host:4222)")
	}
	var o Options
	for _, opt := range opts {
		opt(&o)
	}
	box, err := natsbox.Open(ctx, natsbox.Options{URL: url, Token: o.Token, CredsFile: o.CredsFile, NKeyFile: o.NKeyFile,
		TLSCert: o.TLSCert, TLSKey: o.TLSKey, TLSCA: o.TLSCA, Name: o.Name, Namespace: o.Namespace,
		JSDomain: o.JSDomain, JSAPIPrefix: o.JSAPIPrefix, Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("conn: %w", err)
	}
	return (*Conn)(box), nil
}

// Close closes the connection (and stops the embedded server of a program that runs one).
func (c *Conn) Close() error { return c.box().Close() }

// Namespace is the deployment's namespace the connection uses ("" the default).
func (c *Conn) Namespace() string { return c.box().Names().Namespace() }

// Principal asks the server which principal the connection authenticated as.
func (c *Conn) Principal(ctx context.Context) (string, error) {
	name, _, err := c.box().WhoAmI(ctx)
	return name, err
}

func (c *Conn) box() *natsbox.Box { return (*natsbox.Box)(c) }
