// Package embed gives natsbox.Open its embedded nats-server. Import it for its side effect in a
// program that runs an embedded server:
//
//	import _ "github.com/reins-run/reins/internal/natsbox/embed"
//
// as the reins command, package host and the root package reins do. A program that only
// connects to a server (natsbox.Options.URL), a worker for instance, leaves it out and links
// no nats-server.
//
// It owns that registration only: the server is package natsserver's, what it allows natsbox's.
package embed

import (
	"context"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/natsbox/natsserver"
)

func init() { natsbox.RegisterServer(Start) }

// Start starts an embedded server as natsbox asks (natsbox.RegisterServer).
func Start(ctx context.Context, c natsbox.ServerConfig) (natsbox.Server, error) {
	return natsserver.Start(ctx, Config(c))
}

// Config is c as natsserver takes it.
func Config(c natsbox.ServerConfig) natsserver.Config {
	var check func(string) (string, *natsserver.Perms, bool)
	if c.Auth != nil {
		check = func(token string) (string, *natsserver.Perms, bool) {
			user, p, ok := c.Auth(token)
			return user, (*natsserver.Perms)(p), ok
		}
	}
	return natsserver.Config{Name: c.Name, StoreDir: c.StoreDir, Host: c.Host, Port: c.Port, DontListen: c.DontListen,
		Auth: check, Logger: c.Logger, Debug: c.Debug, Ready: c.Ready}
}
