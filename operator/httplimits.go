package operator

import "time"

// HTTPLimits bound the HTTP listener of reins serve before and around authentication
// (docs/security.md, "The HTTP listener"): what a sender without a token can hold, how long
// any request may take to arrive and to be answered, and how many event streams one principal
// keeps open. They are keys of [limits]; zero values mean the defaults ([DefaultHTTPLimits]).
type HTTPLimits struct {
	// MaxWebhookBytes bounds the body of a webhook delivery (max_webhook_bytes): a larger
	// Content-Length is answered 413 before a byte of the body is read.
	MaxWebhookBytes int64
	// MaxHeaderBytes bounds a request's header (max_header_bytes): more is answered 431.
	MaxHeaderBytes int64
	// ReadHeaderTimeout is how long a request's header may take to arrive
	// (http_read_header_timeout); the connection is closed after it.
	ReadHeaderTimeout time.Duration
	// ReadTimeout is how long a request may take to arrive, header and body
	// (http_read_timeout); an authenticated body may take longer as long as it does not stall
	// for ReadTimeout.
	ReadTimeout time.Duration
	// WriteTimeout is how long an answer may take to be written (http_write_timeout); an event
	// stream extends its deadline by it at each message it sends.
	WriteTimeout time.Duration
	// IdleTimeout is how long a kept-alive connection may wait for its next request
	// (http_idle_timeout).
	IdleTimeout time.Duration
	// MaxUnauthenticated bounds the requests in flight that no token vouches for
	// (max_unauthenticated_requests): webhook deliveries, whose body is read before its
	// signature says who sent it. More are answered 503 with Retry-After.
	MaxUnauthenticated int
	// MaxEventStreams bounds the event streams (GET /v1/runs/{id}/events) one principal has
	// open at once (max_event_streams_per_principal). More are answered 429 with Retry-After.
	MaxEventStreams int
}

// DefaultHTTPLimits returns the HTTP limits of a server whose configuration sets none.
func DefaultHTTPLimits() HTTPLimits {
	return HTTPLimits{
		MaxWebhookBytes:    1 << 20,
		MaxHeaderBytes:     64 << 10,
		ReadHeaderTimeout:  10 * time.Second,
		ReadTimeout:        30 * time.Second,
		WriteTimeout:       60 * time.Second,
		IdleTimeout:        60 * time.Second,
		MaxUnauthenticated: 64,
		MaxEventStreams:    16,
	}
}

// WithDefaults returns h with each zero value replaced by its default.
func (h HTTPLimits) WithDefaults() HTTPLimits {
	d := DefaultHTTPLimits()
	pick := func(v, def int64) int64 {
		if v > 0 {
			return v
		}
		return def
	}
	pickD := func(v, def time.Duration) time.Duration {
		if v > 0 {
			return v
		}
		return def
	}
	return HTTPLimits{
		MaxWebhookBytes:    pick(h.MaxWebhookBytes, d.MaxWebhookBytes),
		MaxHeaderBytes:     pick(h.MaxHeaderBytes, d.MaxHeaderBytes),
		ReadHeaderTimeout:  pickD(h.ReadHeaderTimeout, d.ReadHeaderTimeout),
		ReadTimeout:        pickD(h.ReadTimeout, d.ReadTimeout),
		WriteTimeout:       pickD(h.WriteTimeout, d.WriteTimeout),
		IdleTimeout:        pickD(h.IdleTimeout, d.IdleTimeout),
		MaxUnauthenticated: int(pick(int64(h.MaxUnauthenticated), int64(d.MaxUnauthenticated))),
		MaxEventStreams:    int(pick(int64(h.MaxEventStreams), int64(d.MaxEventStreams))),
	}
}

// httpLimitKeys are the keys of [limits] that HTTPLimits reads.
var httpLimitKeys = []string{"max_webhook_bytes", "max_header_bytes", "http_read_header_timeout", "http_read_timeout",
	"http_write_timeout", "http_idle_timeout", "max_unauthenticated_requests", "max_event_streams_per_principal"}

// httpLimits reads the HTTP keys of the table [limits] (at key) into h.
func (l *loader) httpLimits(key string, t map[string]any, h *HTTPLimits) {
	for k, dst := range map[string]*int64{"max_webhook_bytes": &h.MaxWebhookBytes, "max_header_bytes": &h.MaxHeaderBytes} {
		if v, ok := t[k]; ok {
			l.size(key+"."+k, v, dst)
		}
	}
	if h.MaxHeaderBytes > 0 && h.MaxHeaderBytes < 4<<10 {
		l.add(key+".max_header_bytes", "want at least 4KiB: a request's ordinary header is that large")
	}
	l.durations(key, t, map[string]*time.Duration{"http_read_header_timeout": &h.ReadHeaderTimeout, "http_read_timeout": &h.ReadTimeout,
		"http_write_timeout": &h.WriteTimeout, "http_idle_timeout": &h.IdleTimeout}, `"30s"`)
	for k, dst := range map[string]*int{"max_unauthenticated_requests": &h.MaxUnauthenticated, "max_event_streams_per_principal": &h.MaxEventStreams} {
		switch x := t[k].(type) {
		case nil:
		case int64:
			if x <= 0 || x > 1<<20 {
				l.add(key+"."+k, "want a whole number from 1 to %d", 1<<20)
			} else {
				*dst = int(x)
			}
		default:
			l.add(key+"."+k, "want a whole number from 1")
		}
	}
}

// size reads a size at key (a number of bytes, or a string such as "1MiB") into dst.
func (l *loader) size(key string, v any, dst *int64) {
	switch x := v.(type) {
	case int64:
		if x <= 0 {
			l.add(key, "want a size of more than 0 bytes")
		} else {
			*dst = x
		}
	case string:
		n, err := ParseBytes(x)
		if err != nil {
			l.add(key, "%v", err)
		} else {
			*dst = n
		}
	default:
		l.add(key, `want a size: a number of bytes, or a string such as "64MiB"`)
	}
}
