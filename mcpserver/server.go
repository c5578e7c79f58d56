package mcpserver

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/operator"
)

// Config configures a Server.
type Config struct {
	// As returns the client acting as principal p (required): every act of the server goes
	// through it, on p's own subjects, so that the engine records who acted.
	As func(p operator.Principal) *client.Client
	// Principals authenticates the bearer tokens of Handler's requests (required for Handler):
	// the operator's principals, and the data directory's admin where there is one.
	Principals *operator.Resolved
	// Log receives what a host must not see (the causes of internal errors); nil discards.
	Log *slog.Logger
	// Version is the server's version in its answer to initialize ("" means "dev").
	Version string
	// PollInterval is the interval between polls of a task the server suggests to hosts; 0
	// means one second.
	PollInterval time.Duration
}

// Server is reins as an MCP server. It is safe for concurrent use.
type Server struct {
	cfg Config

	mu       sync.Mutex
	servers  map[string]*mcp.Server // by principal: an SDK server knows whom it serves
	sessions map[string]string      // Streamable HTTP session id → its principal
	live     map[*mcp.ServerSession]context.Context
}

// New returns the MCP server of cfg.
func New(cfg Config) *Server {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	return &Server{cfg: cfg, servers: map[string]*mcp.Server{}, sessions: map[string]string{}, live: map[*mcp.ServerSession]context.Context{}}
}

// Serve serves one host on t as principal p until the host leaves or ctx ends: reins mcp's
// stdio (mcp.StdioTransport).
func (s *Server) Serve(ctx context.Context, p operator.Principal, t mcp.Transport) error {
	ft := &frontTransport{Transport: t, s: s, p: p, ready: make(chan struct{})}
	ss, err := s.sdk(p).Connect(ctx, ft, nil)
	if err != nil {
		return err
	}
	ft.ss = ss
	close(ft.ready)
	return ss.Wait()
}

// sdk returns the SDK server of principal p, made once.
func (s *Server) sdk(p operator.Principal) *mcp.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	if srv, ok := s.servers[p.Name]; ok {
		return srv
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "reins", Version: s.cfg.Version}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}, Resources: &mcp.ResourceCapabilities{}},
	})
	srv.AddReceivingMiddleware(s.calls(p))
	s.servers[p.Name] = srv
	return srv
}

// remember records that the Streamable HTTP session id is principal's.
func (s *Server) remember(id, principal string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions[id] = principal
}

// forget drops the Streamable HTTP session id, when it is principal's.
func (s *Server) forget(id, principal string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[id] == principal {
		delete(s.sessions, id)
	}
}

// sessionOf returns the principal's name of a Streamable HTTP session ("" for none known).
func (s *Server) sessionOf(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[id]
}

// sdkSession returns the SDK's session of p of the Streamable HTTP session id (nil for none).
func (s *Server) sdkSession(p operator.Principal, id string) *mcp.ServerSession {
	for ss := range s.sdk(p).Sessions() {
		if ss.ID() == id {
			return ss
		}
	}
	return nil
}

// lifetime returns a context that ends with the session ss: what follows a task for its host
// stops when the host is gone.
func (s *Server) lifetime(ss *mcp.ServerSession) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx, ok := s.live[ss]; ok {
		return ctx
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.live[ss] = ctx
	go func() {
		_ = ss.Wait()
		cancel()
		s.mu.Lock()
		delete(s.live, ss)
		s.mu.Unlock()
	}()
	return ctx
}
