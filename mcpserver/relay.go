package mcpserver

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Relay carries the messages of a host on local (reins mcp's stdio) to the MCP server of a
// reins server at endpoint (its /mcp), with the bearer token of a principal, and the answers
// back, until either side ends or ctx does: reins mcp --server. The server decides everything.
func Relay(ctx context.Context, local mcp.Transport, endpoint, token string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lc, err := local.Connect(ctx)
	if err != nil {
		return err
	}
	defer lc.Close()
	rt := &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearerTransport{token}}}
	rc, err := rt.Connect(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	errc := make(chan error, 2)
	go func() { errc <- toServer(ctx, lc, rc) }()
	go func() { errc <- carry(ctx, rc, lc) }()
	err = <-errc
	if errors.Is(err, io.EOF) || ctx.Err() != nil {
		return nil
	}
	return err
}

// toServer carries what the host sends to the server. A request's write lasts until the
// server begins to answer it (tasks/result: until the run ends), so each is written apart from
// the rest, but initialize, which the host awaits before anything else, in turn. A request the
// server cannot be reached for is answered to the host with an error saying so.
func toServer(ctx context.Context, from, to mcp.Connection) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		msg, err := from.Read(ctx)
		if err != nil {
			return err
		}
		req, isReq := msg.(*jsonrpc.Request)
		if isReq && req.Method == "initialize" {
			if err := to.Write(ctx, msg); err != nil {
				return err
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := to.Write(ctx, msg)
			if err != nil && isReq && req.IsCall() && ctx.Err() == nil {
				_ = from.Write(ctx, &jsonrpc.Response{ID: req.ID, Error: rpcError(jsonrpc.CodeInternalError, "the reins server did not take %s: %v", req.Method, err)})
			}
		}()
	}
}

// carry carries what the server sends to the host, in order.
func carry(ctx context.Context, from, to mcp.Connection) error {
	for {
		msg, err := from.Read(ctx)
		if err != nil {
			return err
		}
		if err := to.Write(ctx, msg); err != nil {
			return err
		}
	}
}

// bearerTransport sends a principal's token with every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}
