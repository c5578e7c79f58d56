// Package auth builds the authenticators of an embedded NATS server from the operator's
// principals: who a token is, and who a name is, with their roles.
//
// It must not decide what a role may do (natsbox's permissions do) or read a secret (operator
// reads tokens at start).
package auth

import (
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/operator"
)

// Principals resolves the principals of cfg (nil: none) and adds the data directory's admin,
// creating its token at the first start: who an embedded server that listens lets in (reins
// run --listen, reins.New with Listen).
func Principals(dataDir string, cfg *operator.Config) (*operator.Resolved, error) {
	token, err := operator.AdminToken(dataDir)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = &operator.Config{}
	}
	res, err := cfg.Resolve(nil, nil)
	if err != nil {
		return nil, err
	}
	res.AddPrincipal(natsbox.RoleAdmin, token, operator.RoleAdmin)
	return res, nil
}

// Authenticator is the Authenticator of an embedded server serving res's principals.
func Authenticator(res *operator.Resolved) natsbox.Authenticator {
	return func(token string) (natsbox.Identity, bool) {
		p, ok := res.Authenticate(token)
		if !ok {
			return natsbox.Identity{}, false
		}
		return natsbox.Identity{Name: p.Name, Roles: p.Roles}, true
	}
}

// Identity looks up the operator's principals by name, for the consumer proxy of a serve
// process on an external server (natsbox.ServeConsumerProxy).
func Identity(res *operator.Resolved) func(name string) (natsbox.Identity, bool) {
	return func(name string) (natsbox.Identity, bool) {
		p, ok := res.Principal(name)
		if !ok {
			return natsbox.Identity{}, false
		}
		return natsbox.Identity{Name: p.Name, Roles: p.Roles}, true
	}
}

// Roles is the engine's runner.Config.Roles over res: the roles of a principal it knows, none
// of one it does not.
func Roles(res *operator.Resolved) func(principal string) []string {
	return func(name string) []string {
		p, _ := res.Principal(name)
		return p.Roles
	}
}
