package natsbox

import (
	"context"

	"github.com/reins-run/reins/internal/natsbox/serverspec"
)

// The embedded server. natsbox does not link nats-server: Open starts the embedded server
// through the function that package natsbox/embed registers (RegisterServer), so that a program
// that only connects to a server (a worker) does not carry one. A program that embeds imports
// natsbox/embed; package host and the root package reins do.

// Server, ServerConfig and Perms are the embedded server's side of Open (package serverspec,
// which natsserver implements).
type (
	Server       = serverspec.Server
	ServerConfig = serverspec.Config
	Perms        = serverspec.Perms
)

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
