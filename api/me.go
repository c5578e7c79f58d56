package api

import (
	"net/http"

	"github.com/reins-run/reins/operator"
)

// me is the answer of GET /v1/me: who the token is, so that a client (the console) shows only
// what the principal may do. The server still checks every request.
type me struct {
	Name  string   `json:"name"`
	Roles []string `json:"roles"`
}

// getMe serves GET /v1/me (docs/api.md): the authenticated principal's name and roles, to any
// principal that may read (all but a worker, which calls nothing).
func (s *Server) getMe(w http.ResponseWriter, _ *http.Request, p operator.Principal) error {
	roles := p.Roles
	if roles == nil {
		roles = []string{}
	}
	writeJSON(w, http.StatusOK, me{Name: p.Name, Roles: roles})
	return nil
}
