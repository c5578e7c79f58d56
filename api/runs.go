package api

import (
	"net/http"

	"github.com/reins-run/reins/operator"
)

// The routes of runs (docs/api.md, "Runs").

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	return notYet(w, r, p)
}
func (s *Server) getRun(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	return notYet(w, r, p)
}
func (s *Server) getIteration(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	return notYet(w, r, p)
}
func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	return notYet(w, r, p)
}
func (s *Server) decide(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	return notYet(w, r, p)
}
func (s *Server) signal(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	return notYet(w, r, p)
}
func (s *Server) resume(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	return notYet(w, r, p)
}
