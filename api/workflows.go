package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/workflow"
)

// The routes of registered workflows (docs/api.md, "Workflows").

// MaxWorkflowBytes bounds the body of PUT /v1/workflows/{name}: one workflow file.
const MaxWorkflowBytes = 1 << 20

// versionOf is version r of a name whose access is a.
func versionOf(r client.Registered, a client.Access) WorkflowVersion {
	writers := a.Writers
	if writers == nil {
		writers = []string{}
	}
	return WorkflowVersion{Name: r.Name, Version: r.Version, Hash: r.Hash, RegisteredAt: r.RegisteredAt, RegisteredBy: r.RegisteredBy, Owner: a.Owner, Writers: writers}
}

// operatorConfig is the configuration whose submission check registered workflows pass.
func (s *Server) operatorConfig() *operator.Config {
	if s.cfg.Operator != nil {
		return s.cfg.Operator
	}
	return operator.Default()
}

// checkName answers a name no workflow can be registered under: 400 naming the rule.
func checkName(name string) error {
	if err := client.CheckName(name); err != nil {
		return problemf(http.StatusBadRequest, "%s", strings.TrimPrefix(err.Error(), "client: ")+" (a workflow name is [a-z0-9][a-z0-9_-]*, at most 64 characters)")
	}
	return nil
}

// checkFile parses and validates the workflow file source registered as name, as reins
// validate does, as one file (OneFile: E_PATH_OUTSIDE for every key naming another), and
// checks it as a submitted workflow (operator.CheckWorkflow against cfg). It returns the
// definition, normalized, when there is no problem.
func checkFile(name string, source []byte, cfg *operator.Config) (*workflow.Definition, workflow.Problems) {
	file := name + ".toml"
	def, ps := workflow.Parse(file, source)
	if def == nil {
		if len(ps) == 0 {
			ps = workflow.Problems{{Code: workflow.EParse, File: file, Message: "the file holds no workflow"}}
		}
		return nil, ps
	}
	// As workflow.LoadAndValidate: a key the parser reported is not reported again.
	parsed := map[string]bool{}
	for _, p := range ps {
		if p.Key != "" {
			parsed[p.Key] = true
		}
	}
	for _, p := range workflow.Validate(def, workflow.Options{OneFile: true}) {
		if !under(p.Key, parsed) {
			ps = append(ps, p)
		}
	}
	ps = append(ps, operator.CheckWorkflow(cfg, def)...)
	if len(ps) > 0 {
		slices.SortStableFunc(ps, func(a, b workflow.Problem) int { return a.Line - b.Line })
		return nil, ps
	}
	def.Normalize()
	return def, nil
}

// under reports whether key, or a key enclosing it, is in keys.
func under(key string, keys map[string]bool) bool {
	for k := key; k != ""; {
		if keys[k] {
			return true
		}
		i := strings.LastIndexAny(k, ".[")
		if i < 0 {
			return false
		}
		k = k[:i]
	}
	return false
}

func fileProblems(ps workflow.Problems) []FileProblem {
	out := make([]FileProblem, 0, len(ps))
	for _, p := range ps {
		out = append(out, FileProblem{Code: string(p.Code), Line: p.Line, Key: p.Key, Message: p.Message})
	}
	return out
}

// putWorkflow serves PUT /v1/workflows/{name}.
func (s *Server) putWorkflow(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	name := r.PathValue("name")
	if err := checkName(name); err != nil {
		return err
	}
	if r.ContentLength > MaxWorkflowBytes { // refused unread
		return problemf(http.StatusRequestEntityTooLarge, "the workflow file is %d bytes, more than %d (1 MiB), the most a registered workflow may be", r.ContentLength, MaxWorkflowBytes)
	}
	source, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxWorkflowBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return problemf(http.StatusRequestEntityTooLarge, "the workflow file is larger than %d bytes (1 MiB), the most a registered workflow may be", MaxWorkflowBytes)
		}
		return problemf(http.StatusBadRequest, "the body could not be read: %v", err)
	}
	c := s.client(p)
	if err := c.CheckWriter(r.Context(), name); err != nil { // before the file is looked at
		return writeRefused(err)
	}
	def, ps := checkFile(name, source, s.operatorConfig())
	if len(ps) > 0 {
		pr := problemf(http.StatusUnprocessableEntity, "workflow %s.toml cannot be registered: %s", name, count(len(ps)))
		pr.Problems = fileProblems(ps)
		return pr
	}
	reg, created, err := c.Register(r.Context(), name, source, def)
	switch {
	case errors.Is(err, client.ErrTooLarge):
		return problemf(http.StatusRequestEntityTooLarge, "%s", strings.TrimPrefix(err.Error(), "client: "))
	case err != nil:
		return writeRefused(err)
	}
	access, err := c.Access(r.Context(), name)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/v1/workflows/"+name+"?version="+strconv.Itoa(reg.Version))
	}
	writeJSON(w, status, versionOf(reg, access))
	return nil
}

// writeRefused is the 403 of a principal who may not add versions to a name, or err.
func writeRefused(err error) error {
	if errors.Is(err, client.ErrNotWriter) {
		return problemf(http.StatusForbidden, "%s", refusal(err))
	}
	return err
}

// refusal is the sentence of a client's refusal, without the package's prefix and the
// sentinel error it wraps.
func refusal(err error) string {
	msg := strings.TrimPrefix(err.Error(), "client: ")
	for _, sentinel := range []error{client.ErrNotWriter, client.ErrNotOwner, client.ErrBadWriters} {
		msg = strings.TrimSuffix(msg, ": "+sentinel.Error())
	}
	return msg
}

// count says how many problems there are, and where they are listed.
func count(n int) string {
	if n == 1 {
		return "it has 1 problem, listed in problems"
	}
	return fmt.Sprintf("it has %d problems, listed in problems", n)
}

// listWorkflows serves GET /v1/workflows.
func (s *Server) listWorkflows(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	c := s.client(p)
	all, err := c.Workflows(r.Context())
	if err != nil {
		return err
	}
	accesses, err := c.Accesses(r.Context())
	if err != nil {
		return err
	}
	out := workflowList{Workflows: make([]WorkflowVersion, 0, len(all))}
	for _, reg := range all {
		a, ok := accesses[reg.Name]
		if !ok { // registered before access records: derived from its version 1
			if a, err = c.Access(r.Context(), reg.Name); err != nil {
				return err
			}
		}
		out.Workflows = append(out.Workflows, versionOf(reg, a))
	}
	// Runs of files nobody registered (reins run FILE) name their workflows too.
	ran, err := c.RunWorkflows(r.Context())
	if err != nil {
		return err
	}
	out.FromRuns = make([]runWorkflow, 0, len(ran))
	for _, rw := range ran {
		out.FromRuns = append(out.FromRuns, runWorkflow{rw.Name, rw.Runs, rw.LastRunID, rw.LastStarted, append([]string{}, rw.RegisteredAs...)})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getWorkflow serves GET /v1/workflows/{name}[?version=N].
func (s *Server) getWorkflow(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	name := r.PathValue("name")
	version, err := versionParam(r)
	if err != nil {
		return err
	}
	c := s.client(p)
	reg, err := s.registered(r, c, name, version)
	if err != nil {
		return err
	}
	access, err := c.Access(r.Context(), name)
	if err != nil {
		return err
	}
	d := WorkflowSource{WorkflowVersion: versionOf(reg, access), Source: reg.Source, Problems: []FileProblem{}}
	if _, ps := checkFile(name, []byte(reg.Source), s.operatorConfig()); len(ps) > 0 {
		d.Problems = fileProblems(ps)
	}
	bs, err := c.Bundles(r.Context(), reg)
	if err != nil {
		return err
	}
	d.Graph = workflow.Draw(bs.All[bs.Root].Definition)
	writeJSON(w, http.StatusOK, d)
	return nil
}

// versionParam reads ?version=N: 0 when absent, 400 when not a version.
func versionParam(r *http.Request) (int, error) {
	q := r.URL.Query()
	if !q.Has("version") {
		return 0, nil
	}
	n, err := strconv.Atoi(q.Get("version"))
	if err != nil || n < 1 {
		return 0, problemf(http.StatusBadRequest, "the parameter version is %q: want a version, a whole number from 1", q.Get("version"))
	}
	return n, nil
}

// registered reads version (0: the latest) of the workflow registered as name: 404 when there
// is none.
func (s *Server) registered(r *http.Request, c *client.Client, name string, version int) (client.Registered, error) {
	if client.CheckName(name) != nil {
		return client.Registered{}, problemf(http.StatusNotFound, "there is no workflow %q: nothing can be registered under that name", name)
	}
	reg, err := c.Workflow(r.Context(), name, version)
	switch {
	case errors.Is(err, client.ErrNoWorkflow):
		return reg, problemf(http.StatusNotFound, "there is no workflow %s: register it with PUT /v1/workflows/%s", name, name)
	case errors.Is(err, client.ErrNoVersion):
		return reg, problemf(http.StatusNotFound, "workflow %s has no version %d", name, version)
	}
	return reg, err
}

// putWriters serves PUT /v1/workflows/{name}/writers: the name's owner, or an admin, names who
// else may add versions to it.
func (s *Server) putWriters(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	name := r.PathValue("name")
	if client.CheckName(name) != nil {
		return problemf(http.StatusNotFound, "there is no workflow %q: nothing can be registered under that name", name)
	}
	var req WorkflowWriters
	if err := s.decodeBody(w, r, &req, false); err != nil {
		return err
	}
	if req.Writers == nil {
		return problemf(http.StatusBadRequest, `the member "writers" is required: the principals' names and role:NAME entries that may add versions besides the owner ([] for none)`)
	}
	writers, err := client.CheckWriters(*req.Writers)
	if err != nil {
		return problemf(http.StatusUnprocessableEntity, "the member \"writers\": %s", refusal(err))
	}
	if err := s.checkWriters(writers); err != nil {
		return err
	}
	a, err := s.client(p).SetWriters(r.Context(), name, writers)
	switch {
	case errors.Is(err, client.ErrNoWorkflow):
		return problemf(http.StatusNotFound, "there is no workflow %s: register it with PUT /v1/workflows/%s", name, name)
	case errors.Is(err, client.ErrNotOwner):
		return problemf(http.StatusForbidden, "%s", refusal(err))
	case err != nil:
		return err
	}
	writeJSON(w, http.StatusOK, WorkflowAccess{Name: a.Name, Owner: a.Owner, Writers: a.Writers})
	return nil
}

// checkWriters refuses (422) a writer that is not a principal of the operator's configuration,
// or a role that is neither built in nor one of its custom_roles: a typo would grant nothing,
// or grant later to a principal nobody meant.
func (s *Server) checkWriters(writers []string) error {
	for _, wr := range writers {
		if role, ok := strings.CutPrefix(wr, client.RolePrefix); ok {
			if !slices.Contains(operator.Roles, role) && !slices.Contains(s.operatorConfig().CustomRoles, role) {
				return problemf(http.StatusUnprocessableEntity, "the member \"writers\" names role %q, which is neither a built-in role (%s) nor one of the operator's custom_roles", role, strings.Join(operator.Roles, ", "))
			}
			continue
		}
		if _, ok := s.cfg.Principals.Principal(wr); !ok {
			return problemf(http.StatusUnprocessableEntity, "the member \"writers\" names %q, which is no principal of the operator's configuration", wr)
		}
	}
	return nil
}
