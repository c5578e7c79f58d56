package api

import (
	"net/http"

	"github.com/reins-run/reins/operator"
)

// openAPI serves GET /v1/openapi.json (docs/api.md).
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	return notYet(w, r, p)
}
