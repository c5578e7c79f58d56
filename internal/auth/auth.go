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

// AdminAuth is the Authenticator of an embedded server that lets in the data directory's
// admin alone (reins run --listen), creating its token at the first start.
func AdminAuth(dataDir string) (natsbox.Authenticator, error) {
	token, err := operator.AdminToken(dataDir)
	if err != nil {
		return nil, err
	}
	res, err := (&operator.Config{}).Resolve(nil, nil)
	if err != nil {
		return nil, err
	}
	res.AddPrincipal(natsbox.RoleAdmin, token, operator.RoleAdmin)
	return Authenticator(res), nil
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
