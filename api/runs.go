package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/runstore"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/telemetry"
	"github.com/reins-run/reins/workflow"
)

// The routes of runs (docs/api.md, "Runs"), but for POST /v1/runs (start.go) and the events
// (events.go).

// Pagination of GET /v1/runs.
const (
	defaultLimit = 50
	maxLimit     = 500
)

// listStatuses are the statuses GET /v1/runs selects by.
var listStatuses = []protocol.RunStatus{protocol.RunQueued, protocol.RunRunning, protocol.RunWaiting, protocol.RunCompleted, protocol.RunFailed, protocol.RunCancelled, protocol.RunTimedOut}

// listRuns serves GET /v1/runs: runs newest first, a page at a time.
func (s *Server) listRuns(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	qs := r.URL.Query()
	q := client.Query{Status: protocol.RunStatus(qs.Get("status")), Workflow: qs.Get("workflow"), Limit: defaultLimit, Newest: true}
	if q.Status != "" && !slices.Contains(listStatuses, q.Status) {
		return problemf(http.StatusBadRequest, "status %q is not a status of runs: want queued, running, waiting, completed, failed, cancelled or timed_out", q.Status)
	}
	if strings.ContainsAny(q.Workflow, ".*> \t") {
		return problemf(http.StatusBadRequest, "workflow %q is not a workflow's name", q.Workflow)
	}
	if v := qs.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			return problemf(http.StatusBadRequest, "limit %q: want a whole number from 1 to %d", v, maxLimit)
		}
		q.Limit = n
	}
	if v := qs.Get("cursor"); v != "" {
		after, ok := decodeCursor(v)
		if !ok {
			return problemf(http.StatusBadRequest, "cursor %q is not a cursor this API gave: pass the next_cursor of the page before", v)
		}
		q.After = after
	}
	page, err := s.client(p).Query(r.Context(), q)
	if err != nil {
		return err
	}
	out := RunPage{Runs: make([]RunSummary, 0, len(page.Records)), NextCursor: encodeCursor(page.Next)}
	for _, rec := range page.Records {
		out.Runs = append(out.Runs, RunSummary{rec.Run.ID, rec.Run.Workflow, rec.Run.Status, rec.Run.StartedAt, rec.Run.Error})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// cursorPrefix marks the cursors of GET /v1/runs (newest first), so that another string is
// told apart from one the API gave.
const cursorPrefix = "runs-newest:"

// encodeCursor is the opaque cursor of a page's Next ("" for none).
func encodeCursor(next string) string {
	if next == "" {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(cursorPrefix + next))
}

// decodeCursor reads a cursor encodeCursor gave back into a client.Query's After.
func decodeCursor(c string) (string, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", false
	}
	after, ok := strings.CutPrefix(string(raw), cursorPrefix)
	return after, ok && runstore.CheckCursor(after)
}

// Paging of a run's trace (GET /v1/runs/{id}).
const (
	defaultTraceLimit = 100
	maxTraceLimit     = 1000
)

// traceCursorPrefix marks the cursors of a run's trace: the stream sequence of the last event
// of a page.
const traceCursorPrefix = "trace-after:"

// getRun serves GET /v1/runs/{id}: the run result, a page of its trace (trace_limit events
// after trace_cursor), its workflow's name and graph.
func (s *Server) getRun(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	id, err := runID(r)
	if err != nil {
		return err
	}
	limit, after, err := traceParams(r)
	if err != nil {
		return err
	}
	ctx, c := r.Context(), s.client(p)
	rec, err := c.Get(ctx, id)
	if err != nil {
		return runProblem(id, err)
	}
	def, err := c.Definition(ctx, rec)
	if err != nil {
		return err
	}
	page, err := c.EventsPage(ctx, id, after, limit)
	if err != nil {
		return runProblem(id, err)
	}
	// The first page holds the run's start; a later one does not, and the start is read.
	var registered *protocol.Registration
	if after == 0 {
		registered, err = c.RegisteredOf(ctx, rec, page.Events)
	} else {
		var o client.Origin
		o, err = c.Origin(ctx, id)
		registered = o.Registered
	}
	if err != nil {
		return err
	}
	graph := workflow.Draw(def)
	out := RunDetail{Result: client.NewResult(def, rec), Trace: page.Events, TraceMore: page.More, Workflow: def.Name, Graph: &graph, Registered: registered}
	out.TraceID, out.TraceURL = s.traceOf(id)
	if page.Last > 0 {
		out.TraceNext = encodeTraceCursor(page.Last)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// traceOf is the trace id of run id and its address in the operator's tracing backend (none
// when the operator configured no [console] trace_url).
func (s *Server) traceOf(id string) (traceID, traceURL string) {
	traceID = telemetry.TraceID(id).String()
	if op := s.cfg.Operator; op != nil && op.TraceURL != "" {
		traceURL = strings.ReplaceAll(op.TraceURL, operator.TraceIDPlaceholder, traceID)
	}
	return traceID, traceURL
}

// traceParams reads trace_limit (default 100, at most 1000) and trace_cursor (a
// trace_next_cursor this API gave; none: from the first event).
func traceParams(r *http.Request) (limit int, after uint64, err error) {
	qs := r.URL.Query()
	limit = defaultTraceLimit
	if v := qs.Get("trace_limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxTraceLimit {
			return 0, 0, problemf(http.StatusBadRequest, "trace_limit %q: want a whole number from 1 to %d", v, maxTraceLimit)
		}
		limit = n
	}
	if v := qs.Get("trace_cursor"); v != "" {
		var ok bool
		if after, ok = decodeTraceCursor(v); !ok {
			return 0, 0, problemf(http.StatusBadRequest, "trace_cursor %q is not a cursor this API gave: pass the trace_next_cursor of the page before", v)
		}
	}
	return limit, after, nil
}

// encodeTraceCursor is the opaque cursor of the trace after stream sequence seq.
func encodeTraceCursor(seq uint64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(traceCursorPrefix + strconv.FormatUint(seq, 10)))
}

// decodeTraceCursor reads a cursor encodeTraceCursor gave back.
func decodeTraceCursor(c string) (uint64, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, false
	}
	digits, ok := strings.CutPrefix(string(raw), traceCursorPrefix)
	if !ok || digits == "" || len(digits) > 20 || strings.TrimLeft(digits, "0123456789") != "" || digits[0] == '0' {
		return 0, false
	}
	seq, err := strconv.ParseUint(digits, 10, 64)
	return seq, err == nil
}

// getIteration serves GET /v1/runs/{id}/iterations/{step}/{n}: what one iteration did, from
// the records of its answers; ?full=true reads the clipped texts whole.
func (s *Server) getIteration(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	id, err := runID(r)
	if err != nil {
		return err
	}
	step, nv := r.PathValue("step"), r.PathValue("n")
	n, err := strconv.Atoi(nv)
	if err != nil || n < 1 {
		return problemf(http.StatusBadRequest, "iteration %q of step %s: want a whole number from 1", nv, step)
	}
	full, err := boolParam(r, "full")
	if err != nil {
		return err
	}
	ctx, c := r.Context(), s.client(p)
	parts, err := c.Iteration(ctx, id, step, n)
	if errors.Is(err, client.ErrNoIteration) {
		return problemf(http.StatusNotFound, "run %s has no iteration %d of step %s", id, n, step)
	}
	if err != nil {
		return runProblem(id, err)
	}
	if full {
		if err := c.WholeTexts(ctx, id, parts); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, IterationParts{RunID: id, Step: step, Iteration: n, Parts: parts})
	return nil
}

// cancelRun serves POST /v1/runs/{id}/cancel: body optional, {"reason"}.
func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	id, err := runID(r)
	if err != nil {
		return err
	}
	var body struct {
		Reason string `json:"reason"`
	}
	if err := s.decodeBody(w, r, &body, true); err != nil {
		return err
	}
	if err := s.client(p).Cancel(r.Context(), id, body.Reason); err != nil {
		return runProblem(id, err)
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"run_id": id, "status": "cancelling"})
	return nil
}

// decide serves POST /v1/runs/{id}/approvals/{call}: {"decision": "approve"|"deny", "message"}.
// It answers once the engine took the decision: 403 when it refused it, 409 when another
// decision came first.
func (s *Server) decide(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	id, err := runID(r)
	if err != nil {
		return err
	}
	var body struct {
		Decision string `json:"decision"`
		Message  string `json:"message"`
	}
	if err := s.decodeBody(w, r, &body, false); err != nil {
		return err
	}
	if body.Decision != "approve" && body.Decision != "deny" {
		return problemf(http.StatusBadRequest, "the member \"decision\" of the body is %q: want \"approve\" or \"deny\"", body.Decision)
	}
	c := s.client(p)
	done, err := c.Decide(r.Context(), id, r.PathValue("call"), body.Decision == "approve", body.Message, "")
	if err != nil {
		return runProblem(id, err)
	}
	out := decisionAnswer{Decided: make([]Decided, len(done))}
	for i, d := range done {
		out.Decided[i] = Decided{Step: d.Step, CallID: d.CallID, Tool: d.Tool}
	}
	// The decision is stored; how long the answer waits for the engine to take it is bounded,
	// so that a request never hangs on an engine that is down: 202 says it is sent, not taken.
	wctx, cancel := context.WithTimeout(r.Context(), s.cfg.EngineWait)
	defer cancel()
	err = c.AwaitDecided(wctx, id, done)
	switch {
	case errors.Is(err, client.ErrNotWaiting):
		return problemf(http.StatusConflict, "%s", detail(err))
	case err != nil && wctx.Err() != nil && r.Context().Err() == nil:
		writeJSON(w, http.StatusAccepted, out)
		return nil
	case err != nil:
		return runProblem(id, err)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// signal serves POST /v1/runs/{id}/signals/{event}: {"data": ...} (body optional: null).
func (s *Server) signal(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	id, err := runID(r)
	if err != nil {
		return err
	}
	var body struct {
		Data json.RawMessage `json:"data"`
	}
	if err := s.decodeBody(w, r, &body, true); err != nil {
		return err
	}
	event := r.PathValue("event")
	if err := s.client(p).Signal(r.Context(), id, event, body.Data); err != nil {
		return runProblem(id, err)
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"run_id": id, "event": event})
	return nil
}

// resume serves POST /v1/runs/{id}/resume: {"input": ..., "step": "..."}.
func (s *Server) resume(w http.ResponseWriter, r *http.Request, p operator.Principal) error {
	id, err := runID(r)
	if err != nil {
		return err
	}
	var body struct {
		Input json.RawMessage `json:"input"`
		Step  string          `json:"step"`
	}
	if err := s.decodeBody(w, r, &body, false); err != nil {
		return err
	}
	if len(body.Input) == 0 {
		return problemf(http.StatusBadRequest, "the body of %s %s has no member \"input\": the person's answer, a JSON value", r.Method, r.URL.Path)
	}
	c := s.client(p)
	step, err := c.Resume(r.Context(), id, body.Step, body.Input)
	if errors.Is(err, client.ErrAmbiguous) {
		return s.whichStep(r, c, id)
	}
	if err != nil {
		return runProblem(id, err)
	}
	writeJSON(w, http.StatusOK, map[string]string{"run_id": id, "step": step})
	return nil
}

// whichStep is the 400 of a resume that names no step while several of run id wait for input.
func (s *Server) whichStep(r *http.Request, c *client.Client, id string) error {
	rec, err := c.Get(r.Context(), id)
	if err != nil {
		return runProblem(id, err)
	}
	var keys []string
	for _, w := range client.WaitingSteps(nil, rec.Run) {
		if w.Wait == protocol.WaitInput {
			keys = append(keys, w.Key)
		}
	}
	return problemf(http.StatusBadRequest, "steps %s of run %s wait for input: the member \"step\" of the body names the one to resume", strings.Join(keys, ", "), id)
}

// runID returns the run id of r's path: 404 for one no run can have.
func runID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if len(id) > 512 || !possibleRunID(id) {
		return "", problemf(http.StatusNotFound, "there is no run %q", id)
	}
	return id, nil
}

// possibleRunID reports whether id could name a run at all: not empty, of A-Z a-z 0-9 _ - /.
func possibleRunID(id string) bool {
	bad := func(c rune) bool {
		return !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '/')
	}
	return id != "" && !strings.ContainsFunc(id, bad)
}

// runProblem answers the error of the client about run id: the problem of what the client
// refused (no such run, finished, not waiting, not allowed), else err itself (a 500).
func runProblem(id string, err error) error {
	switch {
	case errors.Is(err, client.ErrNotFound):
		return problemf(http.StatusNotFound, "there is no run %s", id)
	case errors.Is(err, client.ErrFinished):
		return problemf(http.StatusConflict, "run %s has already finished", id)
	case errors.Is(err, client.ErrRunNotWaiting):
		return problemf(http.StatusConflict, "run %s waits for nothing now: no step of it waits for a decision, an answer or an event", id)
	case errors.Is(err, client.ErrNotWaiting):
		return problemf(http.StatusNotFound, "%s", detail(err))
	case errors.Is(err, client.ErrForbidden):
		return problemf(http.StatusForbidden, "%s", detail(err))
	case errors.Is(err, wire.ErrBadInput):
		return problemf(http.StatusBadRequest, "%s", detail(err))
	}
	return err
}

// detail is the sentence of a client's error: without the package's prefixes, nor the text of
// the sentinel error it wraps (the status says it).
func detail(err error) string {
	msg := strings.ReplaceAll(err.Error(), "client: ", "")
	for _, e := range []error{client.ErrForbidden, client.ErrNotWaiting, client.ErrRunNotWaiting, client.ErrAmbiguous, client.ErrFinished} {
		msg = strings.TrimSuffix(msg, ": "+e.Error())
	}
	return msg
}

// boolParam reads the query parameter name: true for "true" or "1", false when absent, "false"
// or "0", 400 otherwise.
func boolParam(r *http.Request, name string) (bool, error) {
	switch v := r.URL.Query().Get(name); v {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	default:
		return false, problemf(http.StatusBadRequest, "%s=%q: want true or false", name, v)
	}
}
