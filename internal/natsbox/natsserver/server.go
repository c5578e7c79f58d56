// Package natsserver runs the embedded nats-server of a natsbox.Box: the only package of reins
// that links nats-server. natsbox.Open starts it through the hook that package natsbox/embed
// registers, so that a program that never embeds a server (a worker) does not carry one.
//
// It owns the server's options, its authentication callback, its log and its readiness. It must
// not know reins's layout, roles or subjects (natsbox decides who may do what and passes the
// result as lists of subjects), and imports no reins package but serverspec, the types it
// implements.
package natsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/reins-run/reins/internal/natsbox/serverspec"
)

// Server is a running embedded server.
type Server struct{ ns *server.Server }

// Start starts a server with JetStream and returns once it accepts connections: the function
// natsbox.RegisterServer takes.
func Start(_ context.Context, cfg serverspec.Config) (serverspec.Server, error) {
	ns, err := server.NewServer(&server.Options{
		CustomClientAuthentication: auth(cfg.Auth),
		ServerName:                 cfg.Name,
		JetStream:                  true,
		StoreDir:                   cfg.StoreDir,
		NoSigs:                     true,
		DontListen:                 cfg.DontListen,
		Host:                       cfg.Host,
		Port:                       cfg.Port,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded server: %w", err)
	}
	log := &serverLog{log: cfg.Logger}
	ns.SetLoggerV2(log, cfg.Debug, false, false)
	ns.Start() // synchronous up to the listener; failures are reported through Fatalf
	s := &Server{ns: ns}
	if msg := log.fatalMessage(); msg != "" {
		s.Stop()
		return nil, errors.New(msg)
	}
	if !ns.ReadyForConnections(cfg.Ready) {
		s.Stop()
		return nil, fmt.Errorf("the embedded server was not ready within %s", cfg.Ready.Round(time.Millisecond))
	}
	if !ns.JetStreamEnabled() {
		s.Stop()
		return nil, errors.New("the embedded server started without JetStream")
	}
	return s, nil
}

// ClientURL is the URL of the server's TCP listener ("" when it has none).
func (s *Server) ClientURL() string {
	if s.ns.Addr() == nil {
		return ""
	}
	return s.ns.ClientURL()
}

// InProcessConn returns a connection to the server that does not go through TCP.
func (s *Server) InProcessConn() (net.Conn, error) { return s.ns.InProcessConn() }

// Stop shuts the server down and waits until it has.
func (s *Server) Stop() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// clientAuth is the server's authentication: Auth's verdict on the client's token.
type clientAuth struct {
	check func(token string) (string, *serverspec.Perms, bool)
}

func auth(check func(string) (string, *serverspec.Perms, bool)) server.Authentication {
	return &clientAuth{check: check}
}

func (a *clientAuth) Check(c server.ClientAuthentication) bool {
	token := c.GetOpts().Token
	if token == "" {
		token = c.GetOpts().Password // nats://user:token@host puts it there
	}
	if token == "" || a.check == nil {
		return false
	}
	user, perms, ok := a.check(token)
	if !ok {
		return false
	}
	c.RegisterUser(&server.User{Username: user, Permissions: permissions(perms)})
	return true
}

func permissions(p *serverspec.Perms) *server.Permissions {
	if p == nil {
		return nil
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: p.PublishAllow, Deny: p.PublishDeny},
		Subscribe: &server.SubjectPermission{Allow: p.SubscribeAllow},
	}
}
