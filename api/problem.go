package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Problem is an RFC 9457 problem document, and the error a handler returns to answer with one.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	// Problems are the validation problems of a workflow that could not be registered.
	Problems []FileProblem `json:"problems,omitempty"`
	// hook marks the 401 of a webhook, whose challenge is its signature, not a bearer token.
	hook bool
	// retryAfter, when more than 0, is sent as the header Retry-After (seconds): the answer
	// of a full cap (429, 503).
	retryAfter int
}

// FileProblem is one problem of a workflow file, as reins validate prints it.
type FileProblem struct {
	Code    string `json:"code"`
	Line    int    `json:"line,omitempty"`
	Key     string `json:"key,omitempty"`
	Message string `json:"message"`
}

func (p *Problem) Error() string { return p.Detail }

// problemf returns the problem of status with a detail in one sentence.
func problemf(status int, format string, args ...any) *Problem {
	return &Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: fmt.Sprintf(format, args...)}
}

// writeProblem answers err as a problem document: a *Problem as it is, anything else as a 500
// whose detail says only that the server failed (its cause is logged by the caller, since it
// may name configuration the caller must not see).
func writeProblem(w http.ResponseWriter, r *http.Request, err error) {
	var p *Problem
	if !errors.As(err, &p) {
		p = problemf(http.StatusInternalServerError, "the server failed to answer %s %s; its log says why", r.Method, r.URL.Path)
	}
	if p.Instance == "" {
		p.Instance = r.URL.Path
	}
	switch {
	case p.Status == http.StatusUnauthorized && p.hook:
		w.Header().Set("WWW-Authenticate", `HMAC-SHA256 realm="reins-hooks"`)
	case p.Status == http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="reins"`)
	}
	if p.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.retryAfter))
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// writeJSON answers v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
