package api

import (
	"net/http"

	"github.com/reins-run/reins/operator"
)

// The routes of registered workflows (docs/api.md, "Workflows").

func (s *Server) putWorkflow(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	return notYet(w, r, p)
}
func (s *Server) listWorkflows(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	return notYet(w, r, p)
}
func (s *Server) getWorkflow(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	return notYet(w, r, p)
}
