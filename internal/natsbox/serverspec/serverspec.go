// Package serverspec is what natsbox and the embedded server it starts agree on: how to run the
// server (Config, with the permissions a client gets, Perms) and what a running one offers
// (Server). natsbox takes these types and package natsserver implements them, so that neither
// imports the other: natsbox links no nats-server, and natsserver knows nothing of reins.
//
// It holds types only, and imports nothing of reins.
package serverspec

import (
	"log/slog"
	"net"
	"time"
)

// Config says how to run the embedded server.
type Config struct {
	Name     string // the server's name
	StoreDir string // JetStream stores under StoreDir/jetstream
	// Host and Port are where it listens for TCP clients (Port -1: any free port); with
	// DontListen it accepts in-process connections only.
	Host       string
	Port       int
	DontListen bool
	// Auth judges a client's token: its user name, permissions (nil: everything) and account
	// (nil: the server's own, where JetStream is); ok false refuses it. A client without a token
	// is refused.
	Auth func(token string) (user string, perms *Perms, acct *Account, ok bool)
	// Exports are what the server's own account offers the accounts of Auth's users: they reach
	// it only through their imports of these.
	Exports []Export
	// Logger receives the server's log (its notices at debug level); Debug turns its debug
	// log on.
	Logger *slog.Logger
	Debug  bool
	// Ready bounds the wait for the server to accept connections.
	Ready time.Duration
}

// Perms are the subjects a client may publish on (allow, deny) and subscribe to.
type Perms struct {
	PublishAllow, PublishDeny, SubscribeAllow []string
}

// Export is a subject of the server's own account that other accounts may import: requests on
// it, answered back in the requester's account (a service), or the messages published on it
// (Stream).
type Export struct {
	Subject string
	Stream  bool
	// Streamed: a request's answer is many messages (a pull request's deliveries), not one.
	Streamed bool
}

// Account is a client's own account: every subject in it is its users' alone (their inboxes,
// the replies the server sends them), and it reaches the server's account through Imports only.
// The server creates it at the first connection that names it.
type Account struct {
	Name    string
	Imports []Import
}

// Import brings an export of the server's account into an account: a request published on
// Local goes to Remote in the server's account (a service), or the messages published on Remote
// there arrive on Local (Stream). Their wildcards correspond; Remote "" is Local.
type Import struct {
	Local, Remote string
	Stream        bool
}

// Server is a running embedded server.
type Server interface {
	// ClientURL is the URL of its TCP listener.
	ClientURL() string
	// InProcessConn connects to it without TCP.
	InProcessConn() (net.Conn, error)
	// Stop shuts it down and waits until it has.
	Stop()
}
