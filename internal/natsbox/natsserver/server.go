// Package natsserver runs the embedded nats-server of a natsbox.Box: the only package of reins
// that links nats-server. natsbox.Open starts it through the hook that package natsbox/embed
// registers, so that a program that never embeds a server (a worker) does not carry one.
//
// It owns the server's options, its authentication callback, the accounts of its clients (created
// at their first connection, with the imports natsbox gives), its log and its readiness. It must
// not know reins's layout, roles or subjects (natsbox decides who may do what and passes the
// result as lists of subjects), and imports no reins package but serverspec, the types it
// implements.
package natsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/reins-run/reins/internal/natsbox/serverspec"
)

// Server is a running embedded server.
type Server struct{ ns *server.Server }

// Start starts a server with JetStream and returns once it accepts connections: the function
// natsbox.RegisterServer takes.
func Start(_ context.Context, cfg serverspec.Config) (serverspec.Server, error) {
	ca := &clientAuth{check: cfg.Auth, accounts: map[string]*server.Account{}}
	ns, err := server.NewServer(&server.Options{
		CustomClientAuthentication: ca,
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
	ca.srv = ns
	if err := export(ns.GlobalAccount(), cfg.Exports); err != nil {
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

// clientAuth is the server's authentication: Auth's verdict on the client's token, and the
// account it names, created at its first connection.
type clientAuth struct {
	check func(token string) (string, *serverspec.Perms, *serverspec.Account, bool)
	srv   *server.Server

	mu       sync.Mutex
	accounts map[string]*server.Account
}

func (a *clientAuth) Check(c server.ClientAuthentication) bool {
	token := c.GetOpts().Token
	if token == "" {
		token = c.GetOpts().Password // nats://user:token@host puts it there
	}
	if token == "" || a.check == nil {
		return false
	}
	user, perms, spec, ok := a.check(token)
	if !ok {
		return false
	}
	u := &server.User{Username: user, Permissions: permissions(perms)}
	if spec != nil {
		acc, err := a.account(spec)
		if err != nil {
			a.srv.Errorf("Account %q of user %q: %v", spec.Name, user, err)
			return false
		}
		u.Account = acc
	}
	c.RegisterUser(u)
	return true
}

// account returns the account spec names, created with its imports the first time.
func (a *clientAuth) account(spec *serverspec.Account) (*server.Account, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if acc, ok := a.accounts[spec.Name]; ok {
		return acc, nil
	}
	acc, err := a.srv.RegisterAccount(spec.Name)
	if err != nil {
		return nil, err
	}
	own := a.srv.GlobalAccount()
	for _, im := range spec.Imports {
		remote := im.Remote
		if remote == "" {
			remote = im.Local
		}
		if im.Stream {
			err = acc.AddMappedStreamImport(own, remote, im.Local)
		} else {
			err = acc.AddServiceImport(own, im.Local, remote)
		}
		if err != nil {
			return nil, fmt.Errorf("import %s: %w", im.Local, err)
		}
	}
	a.accounts[spec.Name] = acc
	return acc, nil
}

// export offers exports from acc to every account.
func export(acc *server.Account, exports []serverspec.Export) error {
	for _, e := range exports {
		var err error
		switch {
		case e.Stream:
			err = acc.AddStreamExport(e.Subject, nil)
		case e.Streamed:
			err = acc.AddServiceExportWithResponse(e.Subject, server.Streamed, nil)
		default:
			err = acc.AddServiceExportWithResponse(e.Subject, server.Singleton, nil)
		}
		if err != nil {
			return fmt.Errorf("export %s: %w", e.Subject, err)
		}
	}
	return nil
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
