// Command mcpserver is the MCP server of the e2e tests of MCP tools: over stdio, or streamable
// HTTP with -http. It notes each of its starts (-starts) and each call with the idempotency key
// the call carried in _meta (-calls), can hold its first refund until it is killed (-hold), and
// lists a tool that requires MCP tasks (needs_task), as MCP 2025-11-25 servers may.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reins-run/reins/internal/testkit/mcptest"
)

var (
	starts = flag.String("starts", "", "a `FILE` to append this process's pid to at start")
	calls  = flag.String("calls", "", "a `FILE` to append a line to per call: tool and idempotency key")
	hold   = flag.String("hold", "", "a named pipe `FIFO`: the first refund (while FIFO.held does not exist) writes to it, then blocks until the process is killed")
	addr   = flag.String("http", "", "serve streamable HTTP on `ADDR` (printing its URL) instead of stdio")
	_      = flag.String("token", "", "a credential, which the server does not use (the tests check it never shows)")
)

type orderIn struct {
	OrderID string `json:"order_id"`
}

func main() {
	flag.Parse()
	if *starts != "" {
		if err := mcptest.AppendLine(*starts, strconv.Itoa(os.Getpid())); err != nil {
			log.Fatal(err)
		}
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "mcpserver", Version: "1.0.0"}, nil)
	s.AddReceivingMiddleware(mcptest.RequireTasks("needs_task"))
	mcp.AddTool(s, &mcp.Tool{Name: "refund", Description: "Refund an order."},
		func(_ context.Context, req *mcp.CallToolRequest, in orderIn) (*mcp.CallToolResult, any, error) {
			if err := note(req); err != nil {
				return nil, nil, err
			}
			if err := holdFirst(); err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{"refunded":"` + in.OrderID + `"}`}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "needs_task", Description: "Runs only as an MCP task."},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.Join(note(req), errors.New("called without a task"))
		})
	if *addr == "" {
		if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			log.Fatal(err)
		}
		return
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("http://%s/mcp\n", ln.Addr())
	log.Fatal(http.Serve(ln, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)))
}

// note appends the call's tool and idempotency key to the calls file.
func note(req *mcp.CallToolRequest) error {
	if *calls == "" {
		return nil
	}
	key, _ := req.Params.Meta["reins/idempotency_key"].(string)
	line, err := json.Marshal(map[string]string{"tool": req.Params.Name, "key": key, "pid": strconv.Itoa(os.Getpid())})
	if err != nil {
		return err
	}
	return mcptest.AppendLine(*calls, string(line))
}

// holdFirst blocks the first call for good, once it told the test through the named pipe.
func holdFirst() error {
	if *hold == "" {
		return nil
	}
	if _, err := os.Stat(*hold + ".held"); err == nil {
		return nil
	}
	if err := os.WriteFile(*hold+".held", nil, 0o600); err != nil {
		return err
	}
	f, err := os.OpenFile(*hold, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, _ = f.WriteString("started\n")
	_ = f.Close()
	select {} // until SIGKILL
}
