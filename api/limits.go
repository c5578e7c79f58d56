package api

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/reins-run/reins/internal/defaults"
	"github.com/reins-run/reins/operator"
)

// The bounds of the listener before and around authentication (docs/api.md, "Limits"): what
// a sender without a token can hold (a webhook delivery: a slot of Config.MaxUnauthenticated,
// a body of at most Config.MaxWebhookBytes read before the server's read deadline), how long
// an authenticated body may stall, and how many event streams a principal keeps open.

// Defaults of the limits of Config: those of a server whose configuration sets none
// ([operator.DefaultHTTPLimits]), so that a Config's zero value bounds as reins serve does.
const (
	DefaultMaxWebhookBytes    = 1 << 20
	DefaultMaxUnauthenticated = 64
	DefaultMaxEventStreams    = 16
	DefaultReadTimeout        = 30 * time.Second
	DefaultWriteTimeout       = 60 * time.Second
	DefaultEngineWait         = 30 * time.Second
)

// withDefaults returns c with each zero bound replaced by its default, and a negative
// timeout by 0, which the server reads as none.
func (c Config) withDefaults() Config {
	bound := func(v, def int64) int64 {
		if v > 0 {
			return v
		}
		return def
	}
	c.MaxInputBytes = bound(c.MaxInputBytes, operator.DefaultMaxBytes)
	c.MaxWebhookBytes = bound(c.MaxWebhookBytes, DefaultMaxWebhookBytes)
	c.MaxUnauthenticated = int(bound(int64(c.MaxUnauthenticated), DefaultMaxUnauthenticated))
	c.MaxEventStreams = int(bound(int64(c.MaxEventStreams), DefaultMaxEventStreams))
	c.ReadTimeout = defaults.OrNone(c.ReadTimeout, DefaultReadTimeout)
	c.WriteTimeout = defaults.OrNone(c.WriteTimeout, DefaultWriteTimeout)
	// The 202 of an answer past EngineWait must still be written within the write timeout.
	wait := DefaultEngineWait
	if c.WriteTimeout > 0 {
		wait = min(wait, c.WriteTimeout/2)
	}
	c.EngineWait = time.Duration(bound(int64(c.EngineWait), int64(wait)))
	return c
}

// How long a client refused for a full cap is told to wait (Retry-After, in seconds): a slot
// of the unauthenticated requests frees within a read timeout, a principal's stream when it
// closes one.
const (
	retryUnauthenticated = 1
	retryStreams         = 5
)

// BearerToken returns the token of r's "Authorization: Bearer TOKEN" header: the scheme is
// matched without regard to case (RFC 9110, section 11.1), spaces after it are skipped, and a
// token holding a space is none. False when the header carries no bearer token.
func BearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(token, " ")
	if token == "" || strings.ContainsAny(token, " \t") {
		return "", false
	}
	return token, true
}

// slots is a counting semaphore that never waits: a request takes a slot or is refused.
type slots chan struct{}

func (s slots) take() bool {
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s slots) give() { <-s }

// streamCounts counts the event streams each principal has open.
type streamCounts struct {
	mu  sync.Mutex
	max int
	n   map[string]int
}

// take counts one more stream of principal, or reports false when it has max open.
func (c *streamCounts) take(principal string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[principal] >= c.max {
		return false
	}
	c.n[principal]++
	return true
}

func (c *streamCounts) give(principal string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[principal]--; c.n[principal] <= 0 {
		delete(c.n, principal)
	}
}

// busy is the 503 of a request over Config.MaxUnauthenticated.
func (s *Server) busy() *Problem {
	p := problemf(http.StatusServiceUnavailable, "a sender without a token may not have more than %d webhook deliveries in flight on this server, and that many are: retry after %d s",
		s.cfg.MaxUnauthenticated, retryUnauthenticated)
	p.retryAfter = retryUnauthenticated
	return p
}

// tooManyStreams is the 429 of principal's stream over Config.MaxEventStreams.
func (s *Server) tooManyStreams(principal string) *Problem {
	p := problemf(http.StatusTooManyRequests, "principal %s may not have more than %d event streams open on this server: close one, or retry after %d s",
		principal, s.cfg.MaxEventStreams, retryStreams)
	p.retryAfter = retryStreams
	return p
}

// readBody reads r's body, at most limit bytes (the operator's key names the limit): 413 at once, before reading, when its
// Content-Length says more, and as soon as it sends more; 408 when it does not arrive in time
// (the connection's read deadline: a webhook's is fixed, an authenticated body's moves with
// each read, see deadlineBody).
func readBody(w http.ResponseWriter, r *http.Request, limit int64, key string) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, tooLarge(r, limit, key)
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var max *http.MaxBytesError
	switch {
	case errors.As(err, &max):
		return nil, tooLarge(r, limit, key)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, problemf(http.StatusRequestTimeout, "the body of %s %s did not arrive in time: the server stops reading a body that stalls", r.Method, r.URL.Path)
	case err != nil:
		return nil, problemf(http.StatusBadRequest, "the body of %s %s could not be read: %v", r.Method, r.URL.Path, err)
	}
	return data, nil
}

func tooLarge(r *http.Request, limit int64, key string) *Problem {
	return problemf(http.StatusRequestEntityTooLarge, "the body of %s %s is larger than the server's limit %s (%d bytes)", r.Method, r.URL.Path, key, limit)
}

// deadlineBody is the body of an authenticated request: each read moves the connection's read
// deadline to read from now, so that a large body that keeps coming is read whole while one
// that stalls for read is cut, and its write deadline to write from now, so that the answer
// (408 for a body cut) has its time from the body's last byte. At the body's end the read
// deadline is lifted: the connection's watch for the client going away must not time out, and
// cancel the request, while the handler works.
type deadlineBody struct {
	io.ReadCloser
	rc          *http.ResponseController
	read, write time.Duration
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	now := time.Now()
	_ = b.rc.SetReadDeadline(now.Add(b.read))
	if b.write > 0 {
		_ = b.rc.SetWriteDeadline(now.Add(b.read + b.write))
	}
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		_ = b.rc.SetReadDeadline(time.Time{})
		if b.write > 0 {
			_ = b.rc.SetWriteDeadline(time.Now().Add(b.write))
		}
	}
	return n, err
}
