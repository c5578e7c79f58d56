package natsbox

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"

	"github.com/nats-io/nats.go"
)

// A NATS server answers a publish or a subscription its user may not make with an asynchronous
// error on the connection and nothing else, so a JetStream request on such a subject waits
// until its context ends ("context deadline exceeded"). Every connection of a Box keeps what its
// server refused (its error callback), so that a request waiting at start ends at once with the
// subject named.

// ErrPermission is wrapped by the error of a request the NATS server refused because the
// connection's user lacks the permission (a *PermissionError says which).
var ErrPermission = errors.New("the NATS user lacks a permission")

// PermissionError is a publish or a subscription the NATS server refused the connection's user.
type PermissionError struct {
	Op      string // "publish" or "subscribe"
	Subject string
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("the NATS server refused this connection's user permission to %s to %q (docs/deploy.md lists what each process needs)", e.Op, e.Subject)
}

func (e *PermissionError) Unwrap() error { return ErrPermission }

// permissionRe reads the server's "Permissions Violation for Publish to "S"" (or Subscription).
var permissionRe = regexp.MustCompile(`Permissions Violation for (Publish|Subscription) to "([^"]*)"`)

// parsePermission returns the refusal err reports, nil for any other error.
func parsePermission(err error) *PermissionError {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	m := permissionRe.FindStringSubmatch(err.Error())
	if m == nil {
		return nil
	}
	op := "publish"
	if m[1] == "Subscription" {
		op = "subscribe"
	}
	return &PermissionError{Op: op, Subject: m[2]}
}

// refusals are the refusals one connection's server reported, the last one kept.
type refusals struct {
	mu   sync.Mutex
	last *PermissionError
	n    uint64        // refusals so far
	next chan struct{} // closed and replaced at each refusal
}

// refusalsByConn holds the refusals of every open connection of a Box: *nats.Conn → *refusals.
var refusalsByConn sync.Map

func watchRefusals(nc *nats.Conn) { refusalsByConn.Store(nc, &refusals{next: make(chan struct{})}) }

func forgetRefusals(nc *nats.Conn) { refusalsByConn.Delete(nc) }

// noteRefusal records err on nc's refusals when it is a permission violation.
func noteRefusal(nc *nats.Conn, err error) {
	p := parsePermission(err)
	v, ok := refusalsByConn.Load(nc)
	if p == nil || !ok {
		return
	}
	r := v.(*refusals)
	r.mu.Lock()
	r.last, r.n = p, r.n+1
	close(r.next)
	r.next = make(chan struct{})
	r.mu.Unlock()
}

// refusable wraps request so that a refusal nc's server reports while it runs ends it at once
// with that refusal: a request on a subject the user may not publish on gets no answer, and
// would wait until its context ends. On a connection no Box opened, request runs as it is.
func refusable(nc *nats.Conn, request func(context.Context) error) func(context.Context) error {
	v, ok := refusalsByConn.Load(nc)
	if nc == nil || !ok {
		return request
	}
	r := v.(*refusals)
	return func(ctx context.Context) error {
		r.mu.Lock()
		seen, next := r.n, r.next
		r.mu.Unlock()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-next:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := request(ctx)
		r.mu.Lock()
		last, n := r.last, r.n
		r.mu.Unlock()
		if err != nil && n > seen {
			return last
		}
		return err
	}
}
