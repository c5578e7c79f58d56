// Command mcpeffects is the MCP server of the side-effect tests, on the official MCP Go SDK:
// one side-effecting tool, append_line, whose effect is a line appended to the file named by
// -counter, so that the test counts every time the effect really happened, in the server's
// own process. The line starts with the call's idempotency key (the request's _meta), which
// starts with its run id.
//
// The effect comes -slow after the call arrives. With -on-cancel stop (the honest server) a
// call whose context ends first (the client sent notifications/cancelled, or its HTTP request
// went away) stops without its effect; with -on-cancel finish the server does what it started
// whatever the client says, as a remote system that cannot take a call back does.
//
// It speaks MCP over stdio, or over streamable HTTP at -http ADDR, printing "listening URL"
// on stdout once it listens.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reins-run/reins/mcptool"
)

type appendIn struct {
	Text string `json:"text" jsonschema:"the text of the line"`
}

type appendOut struct {
	Line string `json:"line"`
}

func main() {
	counter := flag.String("counter", "", "the file each effect appends a line to")
	slow := flag.Duration("slow", 0, "how long a call takes before its effect")
	onCancel := flag.String("on-cancel", "stop", "what a call whose context ends does: stop (no effect) or finish")
	addr := flag.String("http", "", "listen for streamable HTTP at this address instead of speaking over stdio")
	flag.Parse()
	if *counter == "" || (*onCancel != "stop" && *onCancel != "finish") {
		log.Fatal("mcpeffects: want -counter FILE and -on-cancel stop|finish")
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "mcpeffects", Version: "1.0.0"}, nil)
	var mu sync.Mutex
	mcp.AddTool(server, &mcp.Tool{Name: "append_line", Description: "Append a line to the counter file."},
		func(ctx context.Context, req *mcp.CallToolRequest, in appendIn) (*mcp.CallToolResult, appendOut, error) {
			key, _ := req.Params.Meta[mcptool.IdempotencyMetaKey].(string)
			if key == "" {
				return nil, appendOut{}, errors.New("the call carries no idempotency key in its _meta")
			}
			t := time.NewTimer(*slow)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				if *onCancel == "stop" {
					return nil, appendOut{}, fmt.Errorf("cancelled before the effect: %w", context.Cause(ctx))
				}
				<-t.C
			}
			line := key + " " + in.Text + fmt.Sprintf(" pid=%d", os.Getpid())
			mu.Lock()
			defer mu.Unlock()
			f, err := os.OpenFile(*counter, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
			if err != nil {
				return nil, appendOut{}, err
			}
			_, werr := f.WriteString(line + "\n")
			if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
				return nil, appendOut{}, err
			}
			return nil, appendOut{Line: line}, nil
		})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *addr == "" {
		if err := server.Run(ctx, &mcp.StdioTransport{}); err != nil && !errors.Is(err, context.Canceled) {
			log.Fatal(err)
		}
		return
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening http://%s/mcp\n", ln.Addr())
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
