package natsbox

import (
	"context"
	"log/slog"
	"net"
	"time"
)

// The embedded server. natsbox does not link nats-server: Open starts the embedded server
// through the function that package natsbox/embed registers (RegisterServer), so that a program
// that only connects to a server (a worker) does not carry one. A program that embeds imports
// natsbox/embed; package host and the root package reins do.

// Server is a running embedded server (natsserver.Server).
type Server interface {
	// ClientURL is the URL of its TCP listener.
	ClientURL() string
	// InProcessConn connects to it without TCP.
	InProcessConn() (net.Conn, error)
	// Stop shuts it down and waits until it has.
	Stop()
}

// ServerConfig says how to run the embedded server (natsserver.Config, field for field).
type ServerConfig struct {
	Name       string
	StoreDir   string
	Host       string
	Port       int
	DontListen bool
	Auth       func(token string) (user string, perms *Perms, ok bool)
	Logger     *slog.Logger
	Debug      bool
	Ready      time.Duration
}

// Perms are the subjects a client may publish on (allow, deny) and subscribe to
// (natsserver.Perms, field for field).
type Perms struct {
	PublishAllow, PublishDeny, SubscribeAllow []string
}

// startServer starts the embedded server; nil until RegisterServer.
var startServer func(context.Context, ServerConfig) (Server, error)

// RegisterServer makes Open start embedded servers with start. Package natsbox/embed calls it
// when it is imported.
func RegisterServer(start func(context.Context, ServerConfig) (Server, error)) { startServer = start }

// jetStreamStoreDir is where the server keeps JetStream under its StoreDir, and randomPort the
// port that asks it for any free one (nats-server's JetStreamStoreDir and RANDOM_PORT).
const (
	jetStreamStoreDir = "jetstream"
	randomPort        = -1
)
