package client

import (
	"context"
	"fmt"
	"slices"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
)

// Dial connects to the NATS server of a reins deployment at url (`reins serve`'s listen
// address, or an external server or cluster) with opts ([conn.Token], [conn.Namespace], ...) and
// returns a client acting as the principal the server knows the connection as, with what it
// may publish: a program with no engine of its own starts, watches, approves and signals runs
// on that deployment. Close closes the connection; workers serve on it too
// (worker.New on [Client.Conn]).
func Dial(ctx context.Context, url string, opts ...conn.Option) (*Client, error) {
	cn, err := conn.Dial(ctx, url, opts...)
	if err != nil {
		return nil, err // conn's sentence names the server and what it refused
	}
	cfg, err := identify(ctx, (*natsbox.Box)(cn))
	if err != nil {
		_ = cn.Close()
		return nil, fmt.Errorf("client: %w", err)
	}
	c := New(cfg)
	c.closeConn = true
	return c, nil
}

// identify is the configuration of a client on box as the principal the server gives
// (natsbox.Box.WhoAmI), with what it may publish.
func identify(ctx context.Context, box *natsbox.Box) (Config, error) {
	cfg := Config{Conn: (*conn.Conn)(box)}
	name, publish, err := box.WhoAmI(ctx)
	if err != nil {
		return cfg, err
	}
	if name != "" && natsbox.CheckToken(name) == nil {
		cfg.Principal = name
	}
	if publish != nil {
		cfg.May = func(subject string) bool {
			return slices.ContainsFunc(publish, func(p string) bool { return natsbox.SubjectMatches(p, subject) })
		}
	}
	return cfg, nil
}

// Conn is the client's connection, for the workers and services built on the same one.
func (c *Client) Conn() *conn.Conn { return c.conn }

// Principal is who the client acts as.
func (c *Client) Principal() string { return c.principal }

// Close closes the connection when Dial opened it; a client made with New leaves its
// connection to the caller.
func (c *Client) Close() error {
	if !c.closeConn {
		return nil
	}
	return c.conn.Close()
}
