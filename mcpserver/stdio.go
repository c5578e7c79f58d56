package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/operator"
)

// frontTransport is a transport of one principal whose connections answer in front of the SDK
// what it does not know (Server.front).
type frontTransport struct {
	mcp.Transport
	s *Server
	p operator.Principal
	// ready is closed once ss, the SDK's session of the connection, is known (Serve).
	ready chan struct{}
	ss    *mcp.ServerSession
}

// session returns the SDK's session of the connection, once Serve knows it (nil if ctx ends).
func (t *frontTransport) session(ctx context.Context) *mcp.ServerSession {
	select {
	case <-t.ready:
		return t.ss
	case <-ctx.Done():
		return nil
	}
}

func (t *frontTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// A connection is a session of its own: a host that starts reins mcp again numbers its
	// requests from 1 again, and its calls must not find the runs of the last one's.
	return &frontConn{Connection: conn, t: t, s: t.s, p: t.p, ctx: ctx, cancel: cancel, session: rand.Text()}, nil
}

// frontConn is a connection whose reads the front sees first: what it answers is written back
// from a goroutine of its own (an answer may wait for a run's end), and the rest is read by the
// SDK; the answer of initialize gets the tasks capability on its way out.
type frontConn struct {
	mcp.Connection
	t      *frontTransport
	s      *Server
	p      operator.Principal
	ctx    context.Context // ends with the connection: its answers and notifications stop
	cancel context.CancelFunc
	// session stands for a session id in the run ids of its calls (RunID).
	session string

	mu     sync.Mutex
	initID *jsonrpc.ID
}

func (f *frontConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := f.Connection.Read(ctx)
		if err != nil {
			return nil, err
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok {
			return msg, nil
		}
		if req.Method == "initialize" && req.IsCall() {
			f.mu.Lock()
			id := req.ID
			f.initID = &id
			f.mu.Unlock()
		}
		handle, ok := f.s.front(f.p, f.session, req)
		if !ok {
			return req, nil
		}
		go f.respond(handle)
	}
}

// respond writes the answer of handle, and follows the task it created, if any: its status,
// its progress, its waits for approval.
func (f *frontConn) respond(handle func(context.Context) (*jsonrpc.Response, *created)) {
	res, c := handle(f.ctx)
	if f.ctx.Err() != nil {
		return // the host left: the run goes on, and its task is found again by id
	}
	if err := f.Connection.Write(f.ctx, res); err != nil {
		return
	}
	if c != nil {
		go f.s.followTask(f.ctx, f.p, f.t.session(f.ctx), *c)
		f.notify(c.runID)
	}
}

// notify sends a notifications/tasks/status each time the status of task id changes, until it
// ends or the connection does.
func (f *frontConn) notify(id string) {
	c := f.s.cfg.As(f.p)
	last := ""
	for u, err := range c.Watch(f.ctx, id, client.WatchOptions{Only: client.WatchRecords}) {
		if err != nil {
			return
		}
		rec := u.Record
		t, err := f.s.taskOf(f.ctx, c, rec)
		if err != nil {
			return
		}
		if t.Status != last && last != "" || t.Status != "working" && last == "" {
			params, _ := json.Marshal(t)
			if f.Connection.Write(f.ctx, &jsonrpc.Request{Method: "notifications/tasks/status", Params: params}) != nil {
				return
			}
		}
		last = t.Status
		if rec.Finished() {
			return
		}
	}
}

func (f *frontConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if res, ok := msg.(*jsonrpc.Response); ok && res.Error == nil {
		f.mu.Lock()
		isInit := f.initID != nil && *f.initID == res.ID
		f.mu.Unlock()
		if isInit {
			res.Result = withTasks(res.Result)
		}
	}
	return f.Connection.Write(ctx, msg)
}

func (f *frontConn) Close() error {
	f.cancel()
	return f.Connection.Close()
}
