// Package natsbox is a NATS connection for reins: an embedded JetStream server or an external one,
// and the layout of streams and buckets the engine uses.
//
// It owns four things: starting and stopping the embedded nats-server (JetStream, file store
// under the data directory, in-process or on loopback only; the server itself is package
// natsserver's, which natsbox reaches through RegisterServer so that a program that does not
// import natsbox/embed links no nats-server), connecting to an external server or
// cluster (credentials, TLS, reconnection), the layout: the names, subjects and configurations
// of the TASKS, EVENTS and DLQ streams and of the reins_runs, reins_checkpoints, reins_workflows
// and reins_effects buckets, created idempotently by EnsureLayout, with the keeper message of the
// task stream that Keeper renews as tasks are published, the names of all of them in a namespace
// (Names: Options.Namespace prefixes them, so that deployments share a server), the JetStream
// API they are reached through (API: another JetStream domain's, or another account's imported
// under a prefix), the mechanics of a publish on the hot path (Publish, UpdateKV), and what
// keeps principals apart on the embedded server: an account of its own for each
// (PrincipalAccount, accounts.go), so that the server's answers and deliveries reach only the
// asker, and the consumer proxy through which principals create and remove consumers
// (ServeConsumerProxy, proxy.go).
//
// It must not hold engine logic: it never decides what to publish, consumes messages, creates
// consumers of its own (the proxy forwards a principal's request, or refuses it) or reads run
// state. It imports no other reins package.
//
// A program that embeds a server imports natsbox/embed (the reins command, package host and
// the root package reins do); without it, Open with no URL fails with one sentence saying so.
package natsbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options says which NATS server a Box uses: an embedded one (URL empty) or an external one.
type Options struct {
	// DataDir is the data directory of the embedded server; its file store lives in
	// DataDir/jetstream. Required when URL is empty, refused when URL is set.
	DataDir string
	// Listen is where the embedded server accepts TCP clients: "" means in-process only (no TCP
	// port); "127.0.0.1:0" picks a free loopback port, "127.0.0.1:4222" a fixed one. "localhost"
	// means 127.0.0.1 and "[::1]:PORT" is accepted; any other host is refused: tokens cross the
	// connection in clear text, so other hosts reach reins through an external server with TLS.
	// Refused when URL is set.
	Listen string
	// Authenticate judges the tokens of the embedded server's clients. The embedded server
	// always requires one: the Box's own connections (and Connect's) use a random token of the
	// process, with the engine's identity; every other client needs a token Authenticate
	// knows, and gets the NATS permissions of its roles (Permissions). Nil: no other client
	// can connect. Refused when URL is set.
	Authenticate Authenticator
	// Token is the token to connect with: to an external server that takes tokens, or to an
	// embedded server another process runs (its URL in URL).
	Token string
	// URL names external server(s), comma-separated (nats://host:4222,nats://other:4222). When
	// set nothing is embedded.
	URL string
	// CredsFile is a user credentials file (JWT and seed), for an external server.
	CredsFile string
	// NKeyFile is a file holding an NKey user seed, for an external server.
	NKeyFile string
	// TLSCert and TLSKey are a client certificate and its key (both or neither), for an external
	// server that verifies clients.
	TLSCert, TLSKey string
	// TLSCA is a file of CA certificates that the external server's certificate must chain to.
	TLSCA string
	// Name is the client connection name shown by the server; "" means "reins".
	Name string
	// Logger receives connection events (disconnected, reconnected, closed, async errors) and the
	// embedded server's log (its notices at debug level). Nil means no logging.
	Logger *slog.Logger
	// Replicas is how many copies of every stream, KV bucket and object store the layout asks
	// for (Box.Layout, EnsureLayout): 0 takes what exists, and 1 for what it creates. More than 1
	// needs a clustered external server; the embedded server refuses it.
	Replicas int
	// Namespace prefixes every subject, stream and bucket of the Box's layout (NewNames), so
	// that deployments and tenants share a server without seeing each other: "" is the default
	// namespace, today's names. The embedded server grants its clients' roles in this namespace.
	Namespace string
	// MaxConsumersPerPrincipal caps the consumers each principal of the embedded server holds at
	// once (the consumer proxy, ServeConsumerProxy); 0 is DefaultMaxConsumersPerPrincipal.
	// Refused when URL is set.
	MaxConsumersPerPrincipal int
	// JSDomain is the JetStream domain whose JetStream the Box uses, for a client of a leaf
	// node that runs a JetStream domain of its own and reaches its hub's ("hub": the API
	// "$JS.hub.API."); one subject token. JSAPIPrefix is the prefix under which the account
	// imports another account's JetStream API ("JS.acme.API"): a subject without wildcards.
	// They are exclusive, and apply to an external server only (NewAPI, Box.API).
	JSDomain, JSAPIPrefix string
}

// String shows the options with the token and the user information of URLs hidden, so that
// printing them (%v, %+v, a log line) never shows a secret.
func (o Options) String() string {
	token := ""
	if o.Token != "" {
		token = "xxxxx"
	}
	return fmt.Sprintf("{DataDir:%s Listen:%s Authenticate:%t Token:%s URL:%s CredsFile:%s NKeyFile:%s TLSCert:%s TLSKey:%s TLSCA:%s Name:%s Namespace:%s JSDomain:%s JSAPIPrefix:%s}",
		o.DataDir, o.Listen, o.Authenticate != nil, token, RedactURL(o.URL), o.CredsFile, o.NKeyFile, o.TLSCert, o.TLSKey, o.TLSCA, o.Name, o.Namespace, o.JSDomain, o.JSAPIPrefix)
}

// GoString is String, for %#v.
func (o Options) GoString() string { return "natsbox.Options" + o.String() }

// DefaultReadyTimeout bounds how long Open waits for the embedded server when ctx has no deadline.
const DefaultReadyTimeout = 10 * time.Second

// EmbeddedServerName is the server name of the embedded server.
const EmbeddedServerName = "reins"

// Messages of the connection events logged through Options.Logger.
const (
	logDisconnected = "nats disconnected"
	logReconnected  = "nats reconnected"
	logClosed       = "nats connection closed"
	logAsyncError   = "nats async error"
	logLameDuck     = "nats server entering lame duck mode"
)

// ErrDataDirLocked is returned by Open when another Box (in this process or another) already
// runs an embedded server on the same data directory.
var ErrDataDirLocked = errors.New("natsbox: data directory in use")

// Box is one NATS connection with its JetStream context, and the embedded server behind it if any.
// Its methods are safe for concurrent use.
type Box struct {
	nc        *nats.Conn
	js        jetstream.JetStream
	srv       Server   // the embedded server this Box runs; nil when external or made by Connect
	inproc    Server   // the embedded server its connections go to (this Box's or its parent's)
	lock      *dirLock // nil when external
	clientURL string
	ownToken  string // the token of this Box's connections to its embedded server
	log       *slog.Logger
	external  Options // the options of an external connection, for Connect
	replicas  int     // Options.Replicas
	names     Names   // Options.Namespace
	api       API     // Options.JSDomain or JSAPIPrefix

	proxy     *Box   // the consumer proxy's connection, when this Box runs a server with principals
	stopProxy func() // stops the consumer proxy

	closed    chan struct{} // closed by the connection's closed handler
	closeOnce sync.Once
	// maxPayload is the connection's max payload as last read, tagged with the count of
	// reconnections then (reconnects): read once per connection to a server rather than under
	// the connection's lock at every answer a worker sends (BENCHMARKS.md). A reconnection,
	// perhaps to another server, makes the tag old; a value read before it, even if stored
	// after it, keeps the old tag.
	maxPayload atomic.Uint64
	reconnects atomic.Uint32
	closeErr   error
}

// Open starts an embedded server (opts.URL == "") or connects to an external one, and returns the
// connection. ctx bounds the start: its deadline, else DefaultReadyTimeout, limits the wait for the
// embedded server, and its deadline shortens the dial timeout of an external connection.
//
// An external server that cannot be reached fails Open at once with an error naming its URL(s),
// user information redacted. Once connected, the connection reconnects without limit and logs
// disconnections and reconnections.
func Open(ctx context.Context, opts Options) (*Box, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("natsbox: open: %w", err)
	}
	if opts.Name == "" {
		opts.Name = "reins"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Replicas < 0 {
		return nil, fmt.Errorf("natsbox: Replicas is %d: want 0 (what exists, 1 when new) or more", opts.Replicas)
	}
	names, err := NewNames(opts.Namespace)
	if err != nil {
		return nil, err
	}
	if _, err := NewAPI(opts.JSDomain, opts.JSAPIPrefix); err != nil {
		return nil, err
	}
	var b *Box
	if opts.URL == "" {
		if opts.Replicas > 1 {
			return nil, fmt.Errorf("natsbox: %d replicas need a NATS cluster of at least %d servers; the embedded server is one: pass --nats with the cluster's URLs, or 1 replica", opts.Replicas, opts.Replicas)
		}
		b, err = openEmbedded(ctx, opts, names, log)
	} else {
		b, err = openExternal(ctx, opts, log)
	}
	if err != nil {
		return nil, err
	}
	b.replicas, b.names = opts.Replicas, names
	return b, nil
}

// startProxy serves the consumer proxy of the principals the embedded server let in (seen), on
// a connection of its own.
func (b *Box) startProxy(ctx context.Context, seen *sync.Map, maxPer int) error {
	c, err := b.Connect(ctx, "reins-consumer-proxy")
	if err != nil {
		return err
	}
	principal := func(name string) (Identity, bool) {
		v, ok := seen.Load(name)
		if !ok {
			return Identity{}, false
		}
		return v.(Identity), true
	}
	stop, err := ServeConsumerProxy(context.Background(), c, ProxyConfig{Principal: principal, MaxPerPrincipal: maxPer, Logger: b.log})
	if err != nil {
		c.Close()
		return err
	}
	b.proxy, b.stopProxy = c, stop
	return nil
}

// Names returns the names of the Box's namespace (Options.Namespace): every stream, bucket and
// subject its processes use.
func (b *Box) Names() Names { return b.names }

// Layout is the layout this Box's processes ensure (EnsureLayout): Options.Replicas, and
// mismatches reported to the Box's logger.
func (b *Box) Layout() Layout { return Layout{Names: b.names, Replicas: b.replicas, Logger: b.log} }

func openEmbedded(ctx context.Context, opts Options, names Names, log *slog.Logger) (*Box, error) {
	switch {
	case opts.CredsFile != "" || opts.NKeyFile != "" || opts.TLSCert != "" || opts.TLSKey != "" || opts.TLSCA != "":
		return nil, errors.New("natsbox: credentials and TLS options apply to an external server only: set URL, or leave them empty for the embedded server")
	case opts.JSDomain != "" || opts.JSAPIPrefix != "":
		return nil, errors.New("natsbox: JSDomain and JSAPIPrefix apply to an external server only (the embedded server's JetStream is its own): set URL, or leave them empty")
	case opts.DataDir == "":
		return nil, errors.New("natsbox: the embedded server needs a data directory: set DataDir")
	case opts.Token != "":
		return nil, errors.New("natsbox: Token is for connecting to a server another process runs: set URL, or leave it empty for the embedded server")
	case startServer == nil:
		return nil, errors.New("natsbox: this program has no embedded NATS server: import github.com/reins-run/reins/internal/natsbox/embed, or set URL")
	}
	host, port, err := parseListen(opts.Listen)
	if err != nil {
		return nil, err
	}
	storeDir := filepath.Join(opts.DataDir, jetStreamStoreDir)
	if err := os.MkdirAll(storeDir, 0o700); err != nil {
		return nil, fmt.Errorf("natsbox: create the JetStream store directory: %w", err)
	}
	lock, err := lockDir(filepath.Join(opts.DataDir, "jetstream.lock"))
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			lock.unlock()
		}
	}()

	wait := DefaultReadyTimeout
	if dl, has := ctx.Deadline(); has {
		wait = time.Until(dl)
	}
	own := newOwnToken()
	var seen sync.Map // the principals the server let in: name → Identity
	srv, err := startServer(ctx, ServerConfig{
		Name: EmbeddedServerName, StoreDir: opts.DataDir, // the server stores under StoreDir/jetstream
		Host: host, Port: port, DontListen: opts.Listen == "",
		Auth:    authenticate(own, opts.Authenticate, names, &seen),
		Exports: names.Exports(),
		Logger:  log.With("component", "nats-server"), Debug: log.Enabled(ctx, slog.LevelDebug),
		Ready: wait,
	})
	if err != nil {
		if opts.Listen != "" {
			return nil, fmt.Errorf("natsbox: embedded server on %s: %w", opts.Listen, err)
		}
		return nil, fmt.Errorf("natsbox: embedded server: %w", err)
	}

	b := &Box{srv: srv, inproc: srv, lock: lock, log: log, closed: make(chan struct{}), ownToken: own}
	copts := append(b.connOptions(opts.Name), nats.Token(own))
	url := ""
	if opts.Listen == "" {
		copts = append(copts, nats.InProcessServer(inProcess{srv}))
	} else {
		url = srv.ClientURL()
		b.clientURL = url
	}
	nc, err := nats.Connect(url, copts...)
	if err != nil {
		srv.Stop()
		return nil, fmt.Errorf("natsbox: connect to the embedded server: %w", err)
	}
	if err := b.setConn(nc); err != nil {
		b.shutdownServer()
		return nil, err
	}
	b.names = names
	if opts.Authenticate != nil {
		if err := b.startProxy(ctx, &seen, opts.MaxConsumersPerPrincipal); err != nil {
			b.closeConn()
			b.shutdownServer()
			return nil, err
		}
	}
	ok = true
	log.Debug("embedded NATS server started", "data_dir", opts.DataDir, "client_url", b.clientURL)
	return b, nil
}

func openExternal(ctx context.Context, opts Options, log *slog.Logger) (*Box, error) {
	switch {
	case opts.DataDir != "":
		return nil, errors.New("natsbox: DataDir applies to the embedded server only: leave it empty when URL is set")
	case opts.Listen != "":
		return nil, errors.New("natsbox: Listen applies to the embedded server only: leave it empty when URL is set")
	case opts.Authenticate != nil:
		return nil, errors.New("natsbox: Authenticate applies to the embedded server only: leave it nil when URL is set")
	case opts.MaxConsumersPerPrincipal != 0:
		return nil, errors.New("natsbox: MaxConsumersPerPrincipal applies to the embedded server only (ServeConsumerProxy serves the principals of an external one): leave it 0 when URL is set")
	case opts.CredsFile != "" && opts.NKeyFile != "":
		return nil, errors.New("natsbox: CredsFile and NKeyFile are exclusive: set one of them")
	case (opts.TLSCert == "") != (opts.TLSKey == ""):
		return nil, errors.New("natsbox: TLSCert and TLSKey go together: set both or neither")
	}
	api, err := NewAPI(opts.JSDomain, opts.JSAPIPrefix)
	if err != nil {
		return nil, err
	}
	shown := RedactURL(opts.URL)
	b := &Box{log: log, closed: make(chan struct{}), external: opts, api: api}
	copts := b.connOptions(opts.Name)
	copts = append(copts, nats.RetryOnFailedConnect(false))
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d < nats.DefaultTimeout {
			copts = append(copts, nats.Timeout(max(d, time.Millisecond)))
		}
	}
	if opts.CredsFile != "" {
		copts = append(copts, nats.UserCredentials(opts.CredsFile))
	}
	if opts.Token != "" {
		copts = append(copts, nats.Token(opts.Token))
	}
	if opts.NKeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(opts.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("natsbox: NKeyFile %s: %w", opts.NKeyFile, err)
		}
		copts = append(copts, o)
	}
	if opts.TLSCert != "" {
		copts = append(copts, nats.ClientCert(opts.TLSCert, opts.TLSKey))
	}
	if opts.TLSCA != "" {
		copts = append(copts, nats.RootCAs(opts.TLSCA))
	}
	nc, err := nats.Connect(opts.URL, copts...)
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
		return nil, fmt.Errorf("natsbox: %w at %s: %s", ErrAuth, shown, authHint(opts))
	}
	if err != nil {
		return nil, fmt.Errorf("natsbox: cannot connect to NATS at %s: %w", shown, err)
	}
	if err := b.setConn(nc); err != nil {
		return nil, err
	}
	if err := accountInfo(ctx, b.js); err != nil {
		b.closeConn()
		return nil, fmt.Errorf("natsbox: JetStream is not available at %s%s: %w", shown, b.api.where(), err)
	}
	log.Debug("connected to NATS", "url", RedactURL(nc.ConnectedUrl()))
	return b, nil
}

// connOptions are the client options of every connection: name, unlimited reconnection and the
// handlers that log connection events and signal the close.
func (b *Box) connOptions(name string) []nats.Option {
	log := b.log
	var once sync.Once
	return []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil {
				log.Warn(logDisconnected, "err", err)
			} else {
				log.Info(logDisconnected)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			b.reconnects.Add(1)
			log.Info(logReconnected, "url", RedactURL(nc.ConnectedUrl()))
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			forgetRefusals(nc)
			log.Debug(logClosed)
			once.Do(func() { close(b.closed) })
		}),
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			noteRefusal(nc, err)
			if sub != nil {
				log.Warn(logAsyncError, "subject", sub.Subject, "err", err)
			} else {
				log.Warn(logAsyncError, "err", err)
			}
		}),
		nats.LameDuckModeHandler(func(nc *nats.Conn) {
			log.Warn(logLameDuck, "url", RedactURL(nc.ConnectedUrl()))
		}),
	}
}

func (b *Box) setConn(nc *nats.Conn) error {
	b.nc = nc
	watchRefusals(nc)
	js, err := b.api.jetStream(nc)
	if err != nil {
		b.closeConn()
		return fmt.Errorf("natsbox: JetStream context: %w", err)
	}
	b.js = js
	return nil
}

// Connect opens another connection named name to the same server: the engine and the workers
// of one process each get their own, so that neither's traffic waits behind the other's in one
// connection. The new Box runs no server (Embedded is false) and its Close closes only its
// connection; close it before the Box that runs the server.
func (b *Box) Connect(ctx context.Context, name string) (*Box, error) {
	if b.inproc == nil {
		opts := b.external
		opts.Name = name
		c, err := openExternal(ctx, opts, b.log)
		if err != nil {
			return nil, err
		}
		c.replicas, c.names = b.replicas, b.names
		return c, nil
	}
	c := &Box{log: b.log, clientURL: b.clientURL, closed: make(chan struct{}), replicas: b.replicas, names: b.names, inproc: b.inproc, ownToken: b.ownToken}
	nc, err := nats.Connect("", append(c.connOptions(name), nats.InProcessServer(inProcess{b.inproc}), nats.Token(b.ownToken))...)
	if err != nil {
		return nil, fmt.Errorf("natsbox: connect to the embedded server: %w", err)
	}
	if err := c.setConn(nc); err != nil {
		return nil, err
	}
	return c, nil
}

// Conn returns the NATS connection.
func (b *Box) Conn() *nats.Conn { return b.nc }

// JetStream returns the JetStream context of the connection, in the JetStream domain or
// behind the API prefix of the Box's options.
func (b *Box) JetStream() jetstream.JetStream { return b.js }

// API returns where the Box reaches JetStream (Options.JSDomain, Options.JSAPIPrefix): the rule
// of the JetStream API and KV write subjects built by hand.
func (b *Box) API() API { return b.api }

// ClientURL returns the URL other processes use to reach the embedded server on loopback, or ""
// when the server is in-process only or external (the caller already knows that URL).
func (b *Box) ClientURL() string { return b.clientURL }

// ServerURL returns the URL of the server the connection is on, with its user information
// hidden (RedactURL): nats.go's ConnectedUrlRedacted hides a password, not a token given as the
// URL's user.
func (b *Box) ServerURL() string { return RedactURL(b.nc.ConnectedUrl()) }

// Embedded reports whether the Box runs its own server.
func (b *Box) Embedded() bool { return b.srv != nil }

// MaxPayload returns the largest message the server accepts, headers included (1 MiB unless an
// external server is configured otherwise).
func (b *Box) MaxPayload() int64 {
	tag := b.reconnects.Load()
	if v := b.maxPayload.Load(); v != 0 && uint32(v>>32) == tag {
		return int64(uint32(v))
	}
	n := b.nc.MaxPayload()
	if n > 0 && n <= math.MaxUint32 { // nats-server allows 64 MiB at most
		b.maxPayload.Store(uint64(tag)<<32 | uint64(n))
	}
	return n
}

// Close drains the connection (pending publishes flushed, subscriptions finished), then shuts the
// embedded server down and waits for it, and releases the data directory. It is idempotent: later
// calls return the first call's result.
func (b *Box) Close() error {
	b.closeOnce.Do(func() {
		if b.proxy != nil {
			b.stopProxy()
			b.proxy.Close()
		}
		b.closeConn()
		b.shutdownServer()
	})
	return b.closeErr
}

// closeConn drains the connection, or closes it if it cannot drain, and waits until it is closed.
func (b *Box) closeConn() {
	if b.nc == nil {
		return
	}
	if err := b.nc.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		b.nc.Close()
	}
	<-b.closed
}

func (b *Box) shutdownServer() {
	if b.srv == nil {
		return
	}
	b.srv.Stop()
	if b.lock != nil {
		if err := b.lock.unlock(); err != nil {
			b.closeErr = fmt.Errorf("natsbox: release the data directory: %w", err)
		}
	}
}

// parseListen checks that listen is a loopback host:port and returns the host and the port as
// nats-server wants them (-1 for a random port).
func parseListen(listen string) (string, int, error) {
	if listen == "" {
		return "", 0, nil
	}
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, fmt.Errorf("natsbox: Listen %q is not host:port (e.g. 127.0.0.1:4222): %v", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("natsbox: Listen %q has a bad port %q: want 0 (any free port) to 65535", listen, portStr)
	}
	if port == 0 {
		port = randomPort
	}
	switch {
	case host == "":
		return "", 0, fmt.Errorf("natsbox: Listen %q has no host, which would listen on every interface: the embedded server listens on loopback only (e.g. 127.0.0.1:%s)", listen, portStr)
	case strings.EqualFold(host, "localhost"):
		return "127.0.0.1", port, nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return "", 0, fmt.Errorf("natsbox: Listen %q is not a loopback address: the embedded server has no authentication and listens on 127.0.0.1 or ::1 only; run an external NATS server (URL) to serve other hosts", listen)
	}
	return ip.String(), port, nil
}

// RedactURL returns urls (comma-separated server URLs) with any user information hidden:
// "nats://alice:secret@host:4222" becomes "nats://alice:xxxxx@host:4222", and a token alone
// ("nats://s3cr3t@host") becomes "nats://xxxxx@host".
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		parts[i] = redactOne(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

func redactOne(u string) string {
	at := strings.LastIndex(u, "@")
	if at < 0 {
		return u
	}
	start := 0
	if i := strings.Index(u, "://"); i >= 0 && i < at {
		start = i + len("://")
	}
	userinfo := u[start:at]
	if strings.Contains(userinfo, "/") { // the "@" is in a path, not in the authority
		return u
	}
	if user, _, ok := strings.Cut(userinfo, ":"); ok {
		return u[:start] + user + ":xxxxx" + u[at:]
	}
	return u[:start] + "xxxxx" + u[at:]
}

// authHint says what to check when a server refused a connection's credentials.
func authHint(opts Options) string {
	switch {
	case opts.Token != "":
		return "the token is not one the server knows (check --token or $REINS_TOKEN)"
	case opts.CredsFile != "" || opts.NKeyFile != "":
		return "check the credentials file"
	}
	return "it requires credentials: pass --token (or set $REINS_TOKEN), or --data DIR on the server's machine"
}

// apiAttempt bounds one JetStream API request whose answer may be lost: a cluster electing a
// new meta leader (its last one died) drops the requests it gets meanwhile, and a request
// waited for with a long context would wait for nothing until it ends.
var apiAttempt = 3 * time.Second // a variable for the tests

// accountInfo asks for the account's JetStream information (Retry), within
// DefaultReadyTimeout when ctx has no deadline.
func accountInfo(ctx context.Context, js jetstream.JetStream) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultReadyTimeout)
		defer cancel()
	}
	return Retry(ctx, refusable(js.Conn(), func(ctx context.Context) error {
		_, err := js.AccountInfo(ctx)
		return err
	}))
}

// unboundedAttempts bounds the attempts of Retry and StartWatch when ctx has no deadline, so
// that a cluster that never answers is an error, not a wait without end.
const unboundedAttempts = 10

// bounded returns ctx, or when it has no deadline, ctx bounded to unboundedAttempts attempts.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, unboundedAttempts*apiAttempt)
}

// Retry runs request, JetStream API requests that are safe to repeat, each time within
// apiAttempt, again after each attempt that got no answer in time (or, after a pause, that
// JetStream answered it is temporarily unavailable: unavailable), until ctx ends (or
// unboundedAttempts attempts, when it has no deadline); it returns the first other outcome, or
// the last attempt's error.
func Retry(ctx context.Context, request func(context.Context) error) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	for {
		actx, cancel := context.WithTimeout(ctx, apiAttempt)
		err := request(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !timedOut(err) && !unavailable(err) {
			return err
		}
		if unavailable(err) && !pause(ctx) {
			return err
		}
	}
}

// unavailable reports whether err is JetStream's "temporarily unavailable" (error code 10008):
// its answer while it has no meta leader, as when a NATS node of a cluster is lost; the
// request is worth asking again after a pause, as one that got no answer.
func unavailable(err error) bool {
	const code = 10008 // JSClusterNotAvailErr
	var apiErr *jetstream.APIError
	var legacy *nats.APIError // what a KV watch's consumer, made through the older API, returns
	return errors.As(err, &apiErr) && apiErr.ErrorCode == code || errors.As(err, &legacy) && legacy.ErrorCode == code
}

// pause waits publishRetryWait before a request is asked again; false when ctx ended first.
func pause(ctx context.Context) bool { return pauseFor(ctx, publishRetryWait) }

// pauseFor waits d; false when ctx ended first.
func pauseFor(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// timedOut reports whether err is a request that got no answer in time, worth asking again:
// the rule of Retry and of the layout's steps (retryTimeouts).
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// StartWatch starts a KV watch with start, whose context is the watch's lifetime: a watch not
// started within apiAttempt (its consumer's request lost with a NATS node, or a stream between
// leaders) is abandoned and started again, as is one that JetStream answered it is temporarily
// unavailable (after a pause), until ctx ends (or unboundedAttempts attempts, when
// it has no deadline). It returns the watcher and the
// function that ends it, which the caller must call.
func StartWatch(ctx context.Context, start func(context.Context) (jetstream.KeyWatcher, error)) (jetstream.KeyWatcher, context.CancelFunc, error) {
	type started struct {
		w   jetstream.KeyWatcher
		err error
	}
	limit, stopLimit := bounded(ctx)
	defer stopLimit()
	for {
		wctx, cancel := context.WithCancel(ctx)
		ch := make(chan started, 1)
		go func() {
			w, err := start(wctx)
			ch <- started{w, err}
		}()
		timer := time.NewTimer(apiAttempt)
		select {
		case s := <-ch:
			timer.Stop()
			if s.err != nil {
				cancel()
				if unavailable(s.err) && pause(limit) {
					continue
				}
				return nil, nil, s.err
			}
			return s.w, cancel, nil
		case <-timer.C:
			cancel()
			if s := <-ch; s.err == nil {
				_ = s.w.Stop()
			}
			if limit.Err() != nil {
				return nil, nil, fmt.Errorf("natsbox: no watch started in %d attempts of %s: %w", unboundedAttempts, apiAttempt, limit.Err())
			}
		}
	}
}
