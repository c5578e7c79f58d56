package mcptool

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A sniffer reads the tool listings a connection receives for what the Go SDK drops when it
// decodes them: a tool's execution.taskSupport (MCP 2025-11-25). A tool whose taskSupport is
// "required" fails any call that is not task-augmented, which the SDK cannot make.
type sniffer struct {
	mu       sync.Mutex
	needTask map[string]bool
}

// required returns the tools listed so far that require tasks, by name on the server.
func (s *sniffer) required() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]bool, len(s.needTask))
	for k := range s.needTask {
		out[k] = true
	}
	return out
}

// toolsResult is the part of a tools/list result the sniffer reads.
type toolsResult struct {
	Tools []struct {
		Name      string `json:"name"`
		Execution *struct {
			TaskSupport string `json:"taskSupport"`
		} `json:"execution"`
	} `json:"tools"`
}

// observeResult notes the tools of result, a JSON-RPC result, when it is a tools/list result.
func (s *sniffer) observeResult(result []byte) {
	if !bytes.Contains(result, []byte(`"tools"`)) {
		return
	}
	var r toolsResult
	if json.Unmarshal(result, &r) != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range r.Tools {
		if t.Execution != nil && t.Execution.TaskSupport == "required" {
			if s.needTask == nil {
				s.needTask = map[string]bool{}
			}
			s.needTask[t.Name] = true
		}
	}
}

// observeMessage notes a JSON-RPC message as sent on the wire (HTTP bodies, server-sent events).
func (s *sniffer) observeMessage(raw []byte) {
	var msg struct {
		Result json.RawMessage `json:"result"`
	}
	if json.Unmarshal(raw, &msg) == nil && len(msg.Result) > 0 {
		s.observeResult(msg.Result)
	}
}

// transport wraps a stdio transport so that the sniffer sees each response it reads.
func (s *sniffer) transport(t mcp.Transport) mcp.Transport { return sniffTransport{t, s} }

type sniffTransport struct {
	mcp.Transport
	s *sniffer
}

func (t sniffTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return sniffConn{c, t.s}, nil
}

type sniffConn struct {
	mcp.Connection
	s *sniffer
}

func (c sniffConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if r, ok := msg.(*jsonrpc.Response); ok && err == nil && len(r.Result) > 0 {
		c.s.observeResult(r.Result)
	}
	return msg, err
}

// httpClient is an HTTP client whose responses the sniffer sees: JSON bodies whole, event
// streams event by event, as the SDK reads them.
func (s *sniffer) httpClient() *http.Client {
	return &http.Client{Transport: sniffRoundTripper{http.DefaultTransport, s}}
}

type sniffRoundTripper struct {
	next http.RoundTripper
	s    *sniffer
}

func (rt sniffRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.next.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	switch ct := resp.Header.Get("Content-Type"); {
	case strings.HasPrefix(ct, "application/json"):
		resp.Body = &jsonBody{ReadCloser: resp.Body, s: rt.s}
	case strings.HasPrefix(ct, "text/event-stream"):
		pr, pw := io.Pipe()
		go rt.s.readEvents(resp.Body, pw)
		resp.Body = pipeBody{pr, resp.Body}
	}
	return resp, nil
}

// jsonBody keeps what is read of a JSON body and shows it to the sniffer at its end.
type jsonBody struct {
	io.ReadCloser
	s    *sniffer
	buf  bytes.Buffer
	seen bool
}

func (b *jsonBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.buf.Len() < maxSniff {
		b.buf.Write(p[:n])
	}
	if err == io.EOF && !b.seen {
		b.seen = true
		b.s.observeMessage(b.buf.Bytes())
	}
	return n, err
}

// maxSniff bounds what the sniffer keeps of one message.
const maxSniff = 16 << 20

// readEvents copies an event stream to w, showing the data of each event to the sniffer.
func (s *sniffer) readEvents(body io.Reader, w *io.PipeWriter) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), maxSniff)
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if data.Len() > 0 {
				s.observeMessage(data.Bytes())
				data.Reset()
			}
		case bytes.HasPrefix(line, []byte("data:")):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.Write(bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" ")))
		}
		if _, err := w.Write(line); err != nil {
			return
		}
		if _, err := w.Write([]byte{'\n'}); err != nil {
			return
		}
	}
	_ = w.CloseWithError(sc.Err())
}

// pipeBody is the reading end of readEvents's pipe; closing it closes the response too.
type pipeBody struct {
	*io.PipeReader
	orig io.Closer
}

func (b pipeBody) Close() error {
	_ = b.PipeReader.Close()
	return b.orig.Close()
}
