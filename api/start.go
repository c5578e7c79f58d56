package api

import (
	"net/http"

	"github.com/reins-run/reins/operator"
)

// startRun serves POST /v1/runs (docs/api.md): a run of a registered workflow.
func (s *Server) startRun(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	return notYet(w, r, p)
}
