package api

import (
	"net/http"

	"github.com/reins-run/reins/operator"
)

// runEvents serves GET /v1/runs/{id}/events (docs/api.md, "Live events").
func (s *Server) runEvents(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	return notYet(w, r, p)
}
