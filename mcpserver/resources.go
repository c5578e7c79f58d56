package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/operator"
)

// The resources of runs: a run's record and result, and one iteration of one of its steps.
const (
	runURIPrefix         = "reins://runs/"
	runURITemplate       = "reins://runs/{id}"
	iterationURITemplate = "reins://runs/{id}/iterations/{step}/{n}"
)

// resource is a resource of resources/list.
type resource struct {
	URI         string `json:"uri"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	MIMEType    string `json:"mimeType"`
}

// resourceTemplate is a template of resources/templates/list.
type resourceTemplate struct {
	URITemplate string `json:"uriTemplate"`
	Name        string `json:"name"`
	Description string `json:"description"`
	MIMEType    string `json:"mimeType"`
}

// resourceTemplates answers resources/templates/list.
func resourceTemplates() any {
	return struct {
		ResourceTemplates []resourceTemplate `json:"resourceTemplates"`
	}{[]resourceTemplate{
		{runURITemplate, "run", "A run of reins: its status, output or stop reason, steps and what it waits for.", "application/json"},
		{iterationURITemplate, "iteration", "One iteration of a step of a run: the model's proposal, the tool calls with their decisions and results, the usage.", "application/json"},
	}}
}

// listResources answers resources/list: the runs p started with tool calls, newest first, a
// page at a time.
func (s *Server) listResources(ctx context.Context, p operator.Principal, params json.RawMessage) (any, error) {
	var prm struct {
		Cursor string `json:"cursor,omitempty"`
	}
	if err := decodeParams("resources/list", params, &prm); err != nil {
		return nil, err
	}
	out := struct {
		Resources  []resource `json:"resources"`
		NextCursor string     `json:"nextCursor,omitempty"`
	}{Resources: []resource{}}
	recs, next, err := s.ownRuns(ctx, p, prm.Cursor)
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
		out.Resources = append(out.Resources, resource{URI: runURIPrefix + rec.Run.ID, Name: "run " + rec.Run.ID,
			Description: "A run of workflow " + rec.Run.Workflow + ", " + string(rec.Run.Status) + ".", MIMEType: "application/json"})
	}
	out.NextCursor = next
	return out, nil
}

// readResource answers resources/read of a run or an iteration, for a principal that may read
// runs.
func (s *Server) readResource(ctx context.Context, p operator.Principal, params json.RawMessage) (any, error) {
	var prm struct {
		URI string `json:"uri"`
	}
	if err := decodeParams("resources/read", params, &prm); err != nil {
		return nil, err
	}
	if !p.MayRead() {
		return nil, rpcError(jsonrpc.CodeInvalidRequest, "principal %s (roles %s) may not read runs: it needs the role viewer, submitter, approver or admin", p.Name, strings.Join(p.Roles, ", "))
	}
	id, step, n, err := parseRunURI(prm.URI)
	if err != nil {
		return nil, err
	}
	c := s.cfg.As(p)
	var body any
	if step == "" {
		rec, err := c.Get(ctx, id)
		if errors.Is(err, client.ErrNotFound) {
			return nil, rpcError(jsonrpc.CodeInvalidParams, "there is no run %s (resource %s)", id, prm.URI)
		}
		if err != nil {
			return nil, err
		}
		if body, err = c.Result(ctx, rec); err != nil {
			return nil, err
		}
	} else {
		parts, err := c.Iteration(ctx, id, step, n)
		switch {
		case errors.Is(err, client.ErrNoIteration), errors.Is(err, client.ErrNotFound):
			return nil, rpcError(jsonrpc.CodeInvalidParams, "run %s has no iteration %d of step %s (resource %s)", id, n, step, prm.URI)
		case err != nil:
			return nil, err
		}
		body = parts
	}
	text, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	type content struct {
		URI      string `json:"uri"`
		MIMEType string `json:"mimeType"`
		Text     string `json:"text"`
	}
	return struct {
		Contents []content `json:"contents"`
	}{[]content{{prm.URI, "application/json", string(text)}}}, nil
}

// parseRunURI reads reins://runs/ID or reins://runs/ID/iterations/STEP/N.
func parseRunURI(uri string) (id, step string, n int, err error) {
	bad := func(why string) error {
		return rpcError(jsonrpc.CodeInvalidParams, "the resource %q is not one of this server's: %s (want %s or %s)", uri, why, runURITemplate, iterationURITemplate)
	}
	rest, ok := strings.CutPrefix(uri, runURIPrefix)
	if !ok {
		return "", "", 0, bad("it does not begin with " + runURIPrefix)
	}
	parts := strings.Split(rest, "/")
	switch {
	case len(parts) == 1 && parts[0] != "":
		return parts[0], "", 0, nil
	case len(parts) == 4 && parts[0] != "" && parts[1] == "iterations" && parts[2] != "":
		n, err := strconv.Atoi(parts[3])
		if err != nil || n < 1 {
			return "", "", 0, bad("its iteration " + strconv.Quote(parts[3]) + " is not a whole number from 1")
		}
		return parts[0], parts[2], n, nil
	}
	return "", "", 0, bad("its path has no run id, or more than a run's iteration")
}
