package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

// ClientConfig configures a Client of the HTTP API.
type ClientConfig struct {
	// URL is the server's base URL (http://127.0.0.1:7400), with or without a trailing slash.
	URL string
	// Token is the bearer token of a principal, sent in the Authorization header only: never
	// in a URL, never in an error.
	Token string
	// HTTP sends the requests; nil means [http.DefaultClient]. Its Timeout, if any, bounds the
	// live event streams too: the Client's callers use a context instead.
	HTTP *http.Client
}

// Client is a client of the HTTP API (docs/api.md): a method per route. An answer that is an
// error comes back as a *Problem ([errors.As]), with the status and the server's detail; a
// server that cannot be reached is an error naming the server's URL. It is safe for
// concurrent use.
type Client struct {
	base   *url.URL
	urlErr error
	token  string
	http   *http.Client
}

// NewClient returns a client of the API at cfg.URL. A URL that is not an http or https URL
// makes every call fail with an error saying so.
func NewClient(cfg ClientConfig) *Client {
	c := &Client{token: cfg.Token, http: cfg.HTTP}
	if c.http == nil {
		c.http = http.DefaultClient
	}
	u, err := url.Parse(strings.TrimRight(cfg.URL, "/"))
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https"):
		c.urlErr = fmt.Errorf("the server URL %q is not an http:// or https:// URL with a host, such as http://127.0.0.1:7400", redact(cfg.URL))
	case u.User != nil:
		c.urlErr = errors.New("the server URL carries a user or password: give the token with --token or $REINS_TOKEN instead, never in a URL")
	case u.RawQuery != "" || u.Fragment != "":
		c.urlErr = fmt.Errorf("the server URL %s has a query or fragment: give only the server's scheme, host and path", redact(cfg.URL))
	default:
		c.base = u
	}
	return c
}

// URL is the server's URL, as errors name it.
func (c *Client) URL() string {
	if c.base == nil {
		return ""
	}
	return c.base.String()
}

// redact is a URL as an error may show it: without its user information.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		if i := strings.Index(raw, "@"); i >= 0 && err != nil {
			return "…" + raw[i:]
		}
		return raw
	}
	u.User = nil
	return u.String()
}

// pathEscape escapes a path parameter (a step PARENT#ITEM becomes PARENT%23ITEM).
func pathEscape(s string) string { return url.PathEscape(s) }

// do sends a request and returns the answer of a success status, else the problem.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, ctype string, body []byte, accept string) (*http.Response, error) {
	if c.urlErr != nil {
		return nil, c.urlErr
	}
	target := c.URL() + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, r)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", ctype)
	}
	return c.send(req, path, accept)
}

// send sends req (to path) with the token, accepting accept or a problem, and returns the
// answer of a success status, else the problem.
func (c *Client) send(req *http.Request, path, accept string) (*http.Response, error) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Accept", accept+", application/problem+json")
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx := req.Context(); ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its URL is said once, below
		}
		return nil, fmt.Errorf("the reins server at %s cannot be reached: %v", c.URL(), err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, c.problem(resp, req.Method, path)
	}
	return resp, nil
}

// problem reads the problem document of an error answer; an answer that is not one (a proxy's
// page) becomes a Problem naming the status.
func (c *Client) problem(resp *http.Response, method, path string) *Problem {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var p Problem
	if (mt == "application/problem+json" || mt == "application/json") && json.Unmarshal(data, &p) == nil && p.Detail != "" {
		if p.Status == 0 {
			p.Status = resp.StatusCode
		}
		return &p
	}
	return &Problem{Type: "about:blank", Title: http.StatusText(resp.StatusCode), Status: resp.StatusCode, Instance: path,
		Detail: fmt.Sprintf("the server at %s answered %s to %s %s", c.URL(), resp.Status, method, path)}
}

// call sends in as JSON (nil: no body) and decodes the answer into out; it returns the status.
func (c *Client) call(ctx context.Context, method, path string, query url.Values, in, out any) (int, error) {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return 0, err
		}
	}
	resp, err := c.do(ctx, method, path, query, "application/json", body, "application/json")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, fmt.Errorf("the server at %s answered %s %s with what is not its JSON: %w", c.URL(), method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// RunStart is the body of POST /v1/runs.
type RunStart struct {
	Workflow string          `json:"workflow"`
	Input    json.RawMessage `json:"input,omitempty"`
	Version  int             `json:"version,omitempty"`
	RunID    string          `json:"run_id,omitempty"`
}

// RunStarted is the answer of POST /v1/runs.
type RunStarted struct {
	RunID    string `json:"run_id"`
	Workflow string `json:"workflow"`
	Version  int    `json:"version"`
	// Existed is set when a run of that run_id existed: nothing was started (200).
	Existed bool `json:"-"`
}

// StartRun starts a run of a registered workflow.
func (c *Client) StartRun(ctx context.Context, req RunStart) (RunStarted, error) {
	var out RunStarted
	status, err := c.call(ctx, http.MethodPost, "/v1/runs", nil, req, &out)
	out.Existed = status == http.StatusOK
	return out, err
}

// RunQuery selects the runs of ListRuns.
type RunQuery struct {
	Status   protocol.RunStatus
	Workflow string
	Limit    int    // 0: the server's default (50)
	Cursor   string // the NextCursor of the page before
}

// RunSummary is one run of a page.
type RunSummary struct {
	RunID     string             `json:"run_id"`
	Workflow  string             `json:"workflow"`
	Status    protocol.RunStatus `json:"status"`
	StartedAt time.Time          `json:"started_at"`
	Error     *protocol.RunError `json:"error"`
}

// RunPage is one page of runs, newest first.
type RunPage struct {
	Runs       []RunSummary `json:"runs"`
	NextCursor string       `json:"next_cursor,omitempty"`
}

// ListRuns returns one page of runs, newest first.
func (c *Client) ListRuns(ctx context.Context, q RunQuery) (RunPage, error) {
	v := url.Values{}
	if q.Status != "" {
		v.Set("status", string(q.Status))
	}
	if q.Workflow != "" {
		v.Set("workflow", q.Workflow)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	var out RunPage
	_, err := c.call(ctx, http.MethodGet, "/v1/runs", v, nil, &out)
	return out, err
}

// RunDetail is GET /v1/runs/{id}: the run result plus a page of its trace, its workflow's
// name and its graph.
type RunDetail struct {
	protocol.Result
	// Trace is a page of the run's events, in order: the first trace_limit (default 100) after
	// trace_cursor (none: from the first).
	Trace []protocol.Event `json:"trace"`
	// TraceNext is the trace_cursor of the page after this one (empty when the page is empty
	// and no cursor was given): a run that goes on stores events after it later.
	TraceNext string `json:"trace_next_cursor,omitempty"`
	// TraceMore reports whether the run had stored events after this page already.
	TraceMore bool              `json:"trace_more"`
	Workflow  string            `json:"workflow"`
	Graph     *workflow.Drawing `json:"graph,omitempty"`
	// Registered is the registered workflow and version the run runs ([client.Origin]); absent
	// for a run of no registered version.
	Registered *protocol.Registration `json:"registered,omitempty"`
	// TraceID is the OpenTelemetry trace id of the run's spans, hex (telemetry.TraceID).
	TraceID string `json:"trace_id"`
	// TraceURL is the run's trace in the operator's tracing backend ([console] trace_url with
	// the trace id in it); absent when the operator configured none.
	TraceURL string `json:"trace_url,omitempty"`
}

// TracePage asks GetRunPage for trace_limit events after trace_cursor.
type TracePage struct {
	Limit  int    // 0: the server's default (100)
	Cursor string // a RunDetail.TraceNext; "": from the first event
}

// GetRun returns a run with the first page of its trace (the server's default size).
func (c *Client) GetRun(ctx context.Context, runID string) (RunDetail, error) {
	return c.GetRunPage(ctx, runID, TracePage{})
}

// GetRunPage returns a run with the page of its trace tp asks for.
func (c *Client) GetRunPage(ctx context.Context, runID string, tp TracePage) (RunDetail, error) {
	q := url.Values{}
	if tp.Limit > 0 {
		q.Set("trace_limit", strconv.Itoa(tp.Limit))
	}
	if tp.Cursor != "" {
		q.Set("trace_cursor", tp.Cursor)
	}
	path := "/v1/runs/" + pathEscape(runID)
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out RunDetail
	_, err := c.call(ctx, http.MethodGet, path, nil, nil, &out)
	return out, err
}

// GetRunTrace returns a run with its whole trace, read a page of maxTraceLimit events at a time
// (reins runs show): the result is the one read with the last page.
func (c *Client) GetRunTrace(ctx context.Context, runID string) (RunDetail, error) {
	d, err := c.GetRunPage(ctx, runID, TracePage{Limit: maxTraceLimit})
	trace := d.Trace
	for err == nil && d.TraceMore {
		d, err = c.GetRunPage(ctx, runID, TracePage{Limit: maxTraceLimit, Cursor: d.TraceNext})
		trace = append(trace, d.Trace...)
	}
	d.Trace = trace
	return d, err
}

// IterationParts is GET /v1/runs/{id}/iterations/{step}/{n}: the answers to one iteration.
type IterationParts struct {
	RunID     string                 `json:"run_id"`
	Step      string                 `json:"step"`
	Iteration int                    `json:"iteration"`
	Parts     []client.IterationPart `json:"parts"`
}

// Iteration returns what iteration n of step did; full reads the clipped texts in whole.
func (c *Client) Iteration(ctx context.Context, runID, step string, n int, full bool) (IterationParts, error) {
	var v url.Values
	if full {
		v = url.Values{"full": {"true"}}
	}
	var out IterationParts
	_, err := c.call(ctx, http.MethodGet, "/v1/runs/"+pathEscape(runID)+"/iterations/"+pathEscape(step)+"/"+strconv.Itoa(n), v, nil, &out)
	return out, err
}

// Cancel asks a run to stop (POST /v1/runs/{id}/cancel).
func (c *Client) Cancel(ctx context.Context, runID, reason string) error {
	var in any
	if reason != "" {
		in = map[string]string{"reason": reason}
	}
	_, err := c.call(ctx, http.MethodPost, "/v1/runs/"+pathEscape(runID)+"/cancel", nil, in, &struct{}{})
	return err
}

// Decided is one thing a decision decided: a pending call of a step, or an approval step
// (CallID "").
type Decided struct {
	Step   string `json:"step"`
	CallID string `json:"call_id"` // "" for an approval step
	Tool   string `json:"tool"`
}

// decisionAnswer is the answer of POST /v1/runs/{id}/approvals/{call}.
type decisionAnswer struct {
	Decided []Decided `json:"decided"`
}

// Decide approves or denies what waits under call: a pending call's id or a step's id. taken
// is false when the server answered 202: the decision is stored, but the engine had not taken
// it within the server's wait (it takes it when it can).
func (c *Client) Decide(ctx context.Context, runID, call string, approve bool, message string) (decided []Decided, taken bool, err error) {
	in := struct {
		Decision string `json:"decision"`
		Message  string `json:"message,omitempty"`
	}{"deny", message}
	if approve {
		in.Decision = "approve"
	}
	var out decisionAnswer
	status, err := c.call(ctx, http.MethodPost, "/v1/runs/"+pathEscape(runID)+"/approvals/"+pathEscape(call), nil, in, &out)
	return out.Decided, status == http.StatusOK, err
}

// Signal sends event name with data to a run.
func (c *Client) Signal(ctx context.Context, runID, name string, data json.RawMessage) error {
	in := map[string]json.RawMessage{}
	if len(data) > 0 {
		in["data"] = data
	}
	_, err := c.call(ctx, http.MethodPost, "/v1/runs/"+pathEscape(runID)+"/signals/"+pathEscape(name), nil, in, &struct{}{})
	return err
}

// Resume answers a run waiting for a person (step "": the one that waits) and returns the
// step resumed.
func (c *Client) Resume(ctx context.Context, runID, step string, input json.RawMessage) (string, error) {
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	in := struct {
		Input json.RawMessage `json:"input"`
		Step  string          `json:"step,omitempty"`
	}{input, step}
	var out struct {
		Step string `json:"step"`
	}
	_, err := c.call(ctx, http.MethodPost, "/v1/runs/"+pathEscape(runID)+"/resume", nil, in, &out)
	return out.Step, err
}

// WorkflowVersion is one version of a registered workflow, with who may add versions to its
// name: its owner (who registered it first), the writers the owner names (principals, and
// "role:NAME"), and admins.
type WorkflowVersion struct {
	Name         string    `json:"name"`
	Version      int       `json:"version"`
	Hash         string    `json:"hash"`
	RegisteredAt time.Time `json:"registered_at"`
	RegisteredBy string    `json:"registered_by"`
	Owner        string    `json:"owner"`
	Writers      []string  `json:"writers"`
}

// WorkflowWriters is the body of PUT /v1/workflows/{name}/writers, and the answer's writers.
type WorkflowWriters struct {
	Writers *[]string `json:"writers"`
}

// WorkflowAccess is the answer of PUT /v1/workflows/{name}/writers: who may add versions to
// the name now.
type WorkflowAccess struct {
	Name    string   `json:"name"`
	Owner   string   `json:"owner"`
	Writers []string `json:"writers"`
}

// SetWriters makes writers (principals' names and "role:NAME") the writers of the workflow
// registered as name, in place of those it had: the name's owner and admins may.
func (c *Client) SetWriters(ctx context.Context, name string, writers []string) (WorkflowAccess, error) {
	if writers == nil {
		writers = []string{}
	}
	var out WorkflowAccess
	_, err := c.call(ctx, http.MethodPut, "/v1/workflows/"+pathEscape(name)+"/writers", nil, WorkflowWriters{Writers: &writers}, &out)
	return out, err
}

// WorkflowSource is GET /v1/workflows/{name}: a version with its source, graph and the
// problems it has against the server's configuration of now.
type WorkflowSource struct {
	WorkflowVersion
	Source   string           `json:"source"`
	Graph    workflow.Drawing `json:"graph"`
	Problems []FileProblem    `json:"problems"`
}

// PutWorkflow registers the TOML of a workflow file under name; created is false when its
// definition is the latest version's (nothing new was registered). A file that cannot be
// registered is a *Problem with Problems.
func (c *Client) PutWorkflow(ctx context.Context, name string, toml []byte) (v WorkflowVersion, created bool, err error) {
	resp, err := c.do(ctx, http.MethodPut, "/v1/workflows/"+pathEscape(name), nil, "application/toml", toml, "application/json")
	if err != nil {
		return v, false, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return v, false, fmt.Errorf("the server at %s answered PUT /v1/workflows/%s with what is not its JSON: %w", c.URL(), name, err)
	}
	return v, resp.StatusCode == http.StatusCreated, nil
}

// workflowList is the answer of GET /v1/workflows.
type workflowList struct {
	Workflows []WorkflowVersion `json:"workflows"`
	FromRuns  []runWorkflow     `json:"from_runs"`
}

// runWorkflow is a workflow of the kept runs (client.RunWorkflow), in GET /v1/workflows.
type runWorkflow struct {
	Name          string    `json:"name"`
	Runs          int       `json:"runs"`
	LastRunID     string    `json:"last_run_id"`
	LastStartedAt time.Time `json:"last_started_at"`
	RegisteredAs  []string  `json:"registered_as"`
}

// Workflows lists the registered workflows, by name.
func (c *Client) Workflows(ctx context.Context) ([]WorkflowVersion, error) {
	var out workflowList
	_, err := c.call(ctx, http.MethodGet, "/v1/workflows", nil, nil, &out)
	return out.Workflows, err
}

// Workflow returns a registered workflow's version (0: the latest).
func (c *Client) Workflow(ctx context.Context, name string, version int) (WorkflowSource, error) {
	var v url.Values
	if version > 0 {
		v = url.Values{"version": {strconv.Itoa(version)}}
	}
	var out WorkflowSource
	_, err := c.call(ctx, http.MethodGet, "/v1/workflows/"+pathEscape(name), v, nil, &out)
	return out, err
}

// StreamStatus is the data of a status message of a run's event stream: the run result, with
// its workflow's name.
type StreamStatus struct {
	protocol.Result
	Workflow string `json:"workflow"`
}

// StreamDelta is the data of a delta message: a piece of a streaming model's reply (its
// text, or a piece of a call it makes).
type StreamDelta struct {
	Step      string `json:"step"`
	Iteration int    `json:"iteration"`
	Turn      int    `json:"turn,omitempty"`
	Text      string `json:"text"`
	CallIndex int    `json:"call_index,omitempty"`
	CallID    string `json:"call_id,omitempty"`
	CallName  string `json:"call_name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
}

// streamEnd is the data of an end message.
type streamEnd struct {
	Status protocol.RunStatus `json:"status"`
}

// StreamMessage is one message of a run's event stream: exactly one of Event, Status, Delta or End
// is set, as Kind says.
type StreamMessage struct {
	Kind   string // event, status, delta or end
	ID     string // an event's position in the run's event stream (Last-Event-ID)
	Event  *protocol.Event
	Status *StreamStatus
	Delta  *StreamDelta
	End    protocol.RunStatus // the run's final status
}

// Events reads the run's event stream (GET /v1/runs/{id}/events) after the event lastID
// ("": from the first), until the end message, the server closes it, or ctx is done. Messages
// of a kind this client does not know are skipped.
func (c *Client) Events(ctx context.Context, runID, lastID string) iter.Seq2[StreamMessage, error] {
	return func(yield func(StreamMessage, error) bool) {
		path := "/v1/runs/" + pathEscape(runID) + "/events"
		resp, err := c.stream(ctx, path, lastID)
		if err != nil {
			yield(StreamMessage{}, err)
			return
		}
		defer resp.Body.Close()
		for raw, err := range readStream(resp.Body) {
			if err != nil {
				if ctx.Err() != nil {
					err = ctx.Err()
				}
				yield(StreamMessage{}, fmt.Errorf("the event stream of run %s from %s broke: %w", runID, c.URL(), err))
				return
			}
			m := StreamMessage{Kind: raw.event, ID: raw.id}
			var derr error
			switch raw.event {
			case "event":
				derr = json.Unmarshal(raw.data, &m.Event)
			case "status":
				derr = json.Unmarshal(raw.data, &m.Status)
			case "delta":
				derr = json.Unmarshal(raw.data, &m.Delta)
			case "end":
				var end streamEnd
				derr = json.Unmarshal(raw.data, &end)
				m.End = end.Status
			default:
				continue
			}
			if derr != nil {
				yield(StreamMessage{}, fmt.Errorf("the event stream of run %s from %s has a %s message that is not its JSON: %w", runID, c.URL(), raw.event, derr))
				return
			}
			if !yield(m, nil) || m.Kind == "end" {
				return
			}
		}
	}
}

// stream opens an event stream.
func (c *Client) stream(ctx context.Context, path, lastID string) (*http.Response, error) {
	if c.urlErr != nil {
		return nil, c.urlErr
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL()+path, nil)
	if err != nil {
		return nil, err
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := c.send(req, path, "text/event-stream")
	if err != nil {
		return nil, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		resp.Body.Close()
		return nil, fmt.Errorf("the server at %s answered GET %s with %s, not an event stream", c.URL(), path, mt)
	}
	return resp, nil
}

// streamMessage is one message of a text/event-stream as it came.
type streamMessage struct {
	id, event string
	data      []byte
}

// readStream reads the messages of a text/event-stream (comments skipped) until it ends;
// an end that is not the end of a message is an error.
func readStream(r io.Reader) iter.Seq2[streamMessage, error] {
	return func(yield func(streamMessage, error) bool) {
		br := bufio.NewReaderSize(r, 64<<10)
		var m streamMessage
		var data [][]byte
		for {
			line, err := br.ReadBytes('\n')
			if err != nil {
				if err == io.EOF {
					if len(line) == 0 && len(data) == 0 && m.event == "" {
						return
					}
					err = io.ErrUnexpectedEOF
				}
				yield(streamMessage{}, err)
				return
			}
			line = bytes.TrimRight(line, "\r\n")
			if len(line) == 0 {
				if len(data) > 0 || m.event != "" {
					m.data = bytes.Join(data, []byte("\n"))
					if m.event == "" {
						m.event = "message"
					}
					if !yield(m, nil) {
						return
					}
				}
				m, data = streamMessage{}, nil
				continue
			}
			if line[0] == ':' {
				continue
			}
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			switch string(field) {
			case "id":
				m.id = string(value)
			case "event":
				m.event = string(value)
			case "data":
				data = append(data, bytes.Clone(value))
			}
		}
	}
}
