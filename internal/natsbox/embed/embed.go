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
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/natsbox/natsserver"
)

func init() { natsbox.RegisterServer(natsserver.Start) }
