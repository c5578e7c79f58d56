package api

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/workflow"
)

// startBodySlack is what a start's body may hold besides its input: the other members.
const startBodySlack = 64 << 10

// startRun serves POST /v1/runs (docs/api.md): a run of a registered workflow.
func (s *Server) startRun(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	body, err := readBody(w, r, s.cfg.MaxInputBytes+startBodySlack, "max_input_bytes")
	if err != nil {
		return err
	}
	var req RunStart
	if err := decodeJSON(r, body, &req, false); err != nil {
		return err
	}
	switch {
	case req.Workflow == "":
		return problemf(http.StatusBadRequest, `the member "workflow" is required: the name of a registered workflow`)
	case req.Version < 0:
		return problemf(http.StatusBadRequest, `the member "version" is %d: want a version, a whole number from 1 (or none for the latest)`, req.Version)
	}
	if req.RunID != "" {
		if err := wire.CheckClientRunID(req.RunID); err != nil {
			return problemf(http.StatusBadRequest, `the member "run_id": %v`, err)
		}
	}
	input := req.Input
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	if int64(len(input)) > s.cfg.MaxInputBytes {
		return problemf(http.StatusRequestEntityTooLarge, "the input is %d bytes, more than the server's max_input_bytes of %d", len(input), s.cfg.MaxInputBytes)
	}
	if err := wire.CheckJSON(input, 0); err != nil {
		return problemf(http.StatusUnprocessableEntity, `the member "input" %v`, err)
	}
	c := s.client(p)
	reg, err := s.registered(r, c, req.Workflow, req.Version)
	if err != nil {
		return err
	}
	bs, err := c.Bundles(r.Context(), reg)
	if err != nil {
		return err
	}
	def := bs.All[bs.Root].Definition
	if string(input) == "null" {
		if step, key, path, ok := def.ReadsInput(); ok {
			where := key + " of step " + step
			if step == "" {
				where = "its " + key
			}
			return problemf(http.StatusUnprocessableEntity, `workflow %s reads the run input (%s uses %s), and the member "input" is missing or null`, reg.Name, where, path)
		}
	}
	if err := def.CheckInput(input); err != nil {
		return problemf(http.StatusUnprocessableEntity, "%s", err)
	}
	if err := s.checkKeys(bs); err != nil {
		return err
	}
	id, err := c.StartWith(r.Context(), bs, input, client.StartOptions{RunID: req.RunID, Registered: &reg})
	switch {
	case errors.Is(err, client.ErrExists):
		return s.startedBefore(w, r, p, c, req.RunID, reg.Name)
	case errors.Is(err, client.ErrForbidden):
		return problemf(http.StatusForbidden, "%s", strings.TrimPrefix(err.Error(), "client: "))
	case err != nil:
		return err
	}
	w.Header().Set("Location", "/v1/runs/"+id)
	status := http.StatusCreated
	if !s.recorded(r.Context(), c, id) {
		status = http.StatusAccepted
	}
	writeJSON(w, status, RunStarted{RunID: id, Workflow: reg.Name, Version: reg.Version})
	return nil
}

// startedBefore answers a start whose run_id names a run that exists: a start retried by the
// principal who made it, of the same workflow, is answered 200 with that run, and nothing new
// starts; anyone else's is 409, saying nothing of the run but that it exists.
func (s *Server) startedBefore(w http.ResponseWriter, r *http.Request, p operator.Principal, c *client.Client, runID, name string) error {
	o, err := c.Origin(r.Context(), runID)
	if err != nil && !errors.Is(err, client.ErrNotFound) {
		return err
	}
	if err != nil || o.By != p.Name {
		return problemf(http.StatusConflict, "principal %s may not start run %s: a run of that id exists and %s did not start it, so choose another run_id", p.Name, runID, p.Name)
	}
	version, err := c.VersionOf(r.Context(), o, name)
	if err != nil {
		return err
	}
	if version == 0 {
		return problemf(http.StatusConflict, "run %s exists and runs another workflow than %s: choose another run_id", runID, name)
	}
	w.Header().Set("Location", "/v1/runs/"+runID)
	writeJSON(w, http.StatusOK, RunStarted{RunID: runID, Workflow: name, Version: version})
	return nil
}

// recorded waits, at most EngineWait, until the engine saved the first record of run id, so
// that the run's routes find it as soon as the start is answered; false when it did not.
func (s *Server) recorded(ctx context.Context, c *client.Client, id string) bool {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.EngineWait)
	defer cancel()
	for u, err := range c.Watch(ctx, id, client.WatchOptions{Only: client.WatchRecords}) {
		rec := u.Record
		return err == nil && rec != nil
	}
	return false
}

// checkKeys answers 422 when the server's built-in workers would fail a model the run calls for
// want of its provider's key: what they would fail on after the run started, it does not start
// with. A server whose steps run on other workers (reins serve --no-workers) cannot know their
// keys, and checks nothing.
func (s *Server) checkKeys(bs *workflow.Bundles) error {
	if !s.cfg.BuiltinWorkers || s.cfg.Principals == nil {
		return nil
	}
	hashes := slices.Sorted(maps.Keys(bs.All))
	if i := slices.Index(hashes, bs.Root); i > 0 { // the run's own workflow first
		hashes = append([]string{bs.Root}, slices.Delete(hashes, i, i+1)...)
	}
	for _, hash := range hashes {
		d := bs.All[hash].Definition
		for _, st := range d.Steps {
			if st.Type != workflow.LLM && st.Type != workflow.Agent {
				continue
			}
			names := []string{st.Model}
			if st.Context != nil {
				names = append(names, st.Context.Summarizer)
			}
			for _, name := range names {
				m, ok := d.Models[name]
				if !ok || m.Provider == "scripted" || m.Provider == "replay" {
					continue
				}
				if _, err := s.cfg.Principals.APIKey(m.Provider); err != nil {
					return problemf(http.StatusUnprocessableEntity, "workflow %s: model %s of step %s cannot be called on this server: %v (in the environment of reins serve, which it reads at start); the run did not start", d.Name, name, st.ID, err)
				}
			}
		}
	}
	return nil
}
