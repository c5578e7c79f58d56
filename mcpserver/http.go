package mcpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reins-run/reins/operator"
)

// MaxBodyBytes bounds the body of a request to Handler.
const MaxBodyBytes = 10 << 20

// principalKey is where TokenInfo.Extra holds the authenticated principal.
const principalKey = "reins/principal"

// Handler returns the MCP server over Streamable HTTP, for reins serve's /mcp: every request
// carries the bearer token of a principal of the operator's configuration (401 without one),
// and a session is its principal's only (403 to anyone else's token).
func (s *Server) Handler() http.Handler {
	sdk := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		return s.sdk(principalOf(r.Context()))
	}, &mcp.StreamableHTTPOptions{MaxRequestBodyBytes: MaxBodyBytes})
	bearer := auth.RequireBearerToken(s.verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	inner := bearer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serveHTTP(w, r, sdk) }))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f := strings.Fields(r.Header.Get("Authorization")); len(f) != 2 || !strings.EqualFold(f[0], "bearer") {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, r.URL.Path+" needs the header Authorization: Bearer TOKEN, the token of a principal of the operator's configuration", http.StatusUnauthorized)
			return
		}
		// A call waits for its run, and a session's stream stays open: the server's write
		// deadline, meant for answers that come at once, is lifted once the token is known.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		inner.ServeHTTP(w, r)
	})
}

// verify authenticates a bearer token as a principal of the operator's configuration: the
// session's user is the principal's name, which the SDK holds every request of a session to.
func (s *Server) verify(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	p, ok := s.cfg.Principals.Authenticate(token)
	if !ok {
		return nil, fmt.Errorf("%w: the bearer token is not the token of any principal of the operator's configuration", auth.ErrInvalidToken)
	}
	return &auth.TokenInfo{UserID: p.Name, Extra: map[string]any{principalKey: p}}, nil
}

// principalOf returns the principal a request of Handler was authenticated as.
func principalOf(ctx context.Context) operator.Principal {
	if ti := auth.TokenInfoFromContext(ctx); ti != nil {
		p, _ := ti.Extra[principalKey].(operator.Principal)
		return p
	}
	return operator.Principal{}
}

// serveHTTP answers a POST of a method the front answers itself (as JSON), and passes the rest
// to the SDK: a tools/call with its run's id, initialize with its answer given the tasks
// capability.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request, sdk http.Handler) {
	if r.Method == http.MethodDelete { // the host ends its session
		sdk.ServeHTTP(w, r)
		s.forget(r.Header.Get("Mcp-Session-Id"), principalOf(r.Context()).Name)
		return
	}
	if r.Method != http.MethodPost {
		sdk.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, fmt.Sprintf("the body is more than %d bytes", MaxBodyBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "the body could not be read: "+err.Error(), http.StatusBadRequest)
		return
	}
	msg, err := jsonrpc.DecodeMessage(body)
	req, ok := msg.(*jsonrpc.Request)
	if err != nil || !ok { // the SDK says what is wrong, or takes a response
		s.pass(w, r, sdk, body)
		return
	}
	p := principalOf(r.Context())
	session := r.Header.Get("Mcp-Session-Id")
	if req.Method == "initialize" {
		s.initialize(w, r, sdk, body)
		if id := w.Header().Get("Mcp-Session-Id"); id != "" {
			s.remember(id, p.Name)
		}
		return
	}
	handle, ok := s.front(p, session, req)
	if !ok {
		if b, err := jsonrpc.EncodeMessage(req); err == nil { // stamped with its run's id
			body = b
		}
		s.pass(w, r, sdk, body)
		return
	}
	switch owner := s.sessionOf(session); {
	case session == "":
		http.Error(w, req.Method+" needs the header Mcp-Session-Id of a session this principal initialized", http.StatusBadRequest)
		return
	case owner == "":
		http.Error(w, "session not found", http.StatusNotFound)
		return
	case owner != p.Name:
		http.Error(w, "session user mismatch", http.StatusForbidden)
		return
	}
	res, c := handle(r.Context())
	out, err := jsonrpc.EncodeMessage(res)
	if err != nil {
		s.cfg.Log.Error("mcp: an answer could not be encoded", "method", req.Method, "err", err)
		http.Error(w, "the answer could not be encoded", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
	if ss := s.sdkSession(p, session); c != nil && ss != nil { // its notifications and questions go on the session's stream
		go s.followTask(s.lifetime(ss), p, ss, *c)
	}
}

// pass gives r, with body, to the SDK.
func (s *Server) pass(w http.ResponseWriter, r *http.Request, sdk http.Handler, body []byte) {
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	sdk.ServeHTTP(w, r)
}

// initialize passes an initialize to the SDK, and writes its answer with the tasks capability.
func (s *Server) initialize(w http.ResponseWriter, r *http.Request, sdk http.Handler, body []byte) {
	b := &buffered{header: w.Header()}
	s.pass(b, r, sdk, body)
	out := withTasks(b.body.Bytes())
	w.Header().Del("Content-Length")
	if b.status != 0 {
		w.WriteHeader(b.status)
	}
	_, _ = w.Write(out)
}

// buffered is a ResponseWriter that keeps what it is given: the short answer of initialize.
type buffered struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *buffered) Header() http.Header { return b.header }
func (b *buffered) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}
func (b *buffered) Write(p []byte) (int, error) { return b.body.Write(p) }
func (b *buffered) Flush()                      {}
