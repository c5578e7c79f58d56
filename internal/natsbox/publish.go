package natsbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/intern"
)

// Publishing in the hot path of an iteration. The engine and the workers store two messages and
// one KV write per agent_loop iteration; jetstream.PublishMsg decodes each acknowledgement with
// encoding/json through embedded pointer structs, which a CPU profile of the 64-loop benchmark
// put at 5% of everything an iteration costs. Publish is the same request with the
// acknowledgement read by ParsePubAck; anything it does not recognise goes to encoding/json.

// A publish nobody answered (a stream between leaders, a server starting) is tried again every
// publishRetryWait for publishNoStream, within ctx: the followers of a replicated stream whose
// leader died wait 4 to 9 s for it before they elect another (nats-server's Raft election
// timeout), and a write that gave up after 4 s (as it did) was decided again after the
// election rather than stored the moment it ended. A subject no stream takes fails after it.
//
// A publish the stream took and never answered is sent again after PublishAttempt, until ctx
// ends: the followers of a stream whose leader died drop what they get, and so does a node that
// dies with the request in its buffers, so a request waited for until the caller's deadline
// (10 s for an engine's commands) waited for nothing long after a new leader was elected (a
// node-failover benchmark's publishes all ended that way, 10 s after each kill). Sending it
// again is safe: a message with a message id is stored once, and a KV update that landed the
// first time fails its compare-and-set the second, which its callers take as a change to read.
var (
	publishNoStream  = 10 * time.Second
	publishRetryWait = 250 * time.Millisecond
	publishAttempt   = PublishAttempt // a variable for the tests
)

// PublishAttempt is how long a publish waits for its acknowledgement before it is sent again.
const PublishAttempt = time.Second

// PullExpiry is how long a pull request of the engine's and the workers' consumptions waits at
// the server, and PullHeartbeat how often the server says it is still there meanwhile. The
// library pulls again after two heartbeats missed: a pull request left with a consumer leader
// that died (a NATS node lost) is replaced after two PullHeartbeats, so that the leader
// elected next gets one within about two seconds of its election, not after two halves of the
// expiry (5 s) nor the library's default (30 s). (An expiry of 2 s was tried: under a
// node-failover benchmark on two busy cores, 10 of 16 partitions then crawled at about two
// events a second.)
const (
	PullExpiry    = 5 * time.Second
	PullHeartbeat = time.Second
)

// Publish stores m in the stream its subject belongs to and returns the stream's
// acknowledgement, like jetstream.JetStream.PublishMsg without options: set the message id and
// expectations in m.Header. An error reply of the stream is returned as a *jetstream.APIError.
// It is [PublishWithin] bounded by ctx alone.
func Publish(ctx context.Context, nc *nats.Conn, m *nats.Msg) (*jetstream.PubAck, error) {
	ack, err := PublishWithin(ctx, nc, m, 0)
	if err != nil {
		return nil, err
	}
	return &ack, nil
}

// PublishWithin is Publish that also ends within the duration given (none when 0), as a
// context with that timeout would, without one: the hot path of an iteration publishes an
// answer and a task, and a context and timer per publish were six of its allocations (and the
// acknowledgement, returned as a value, one more). Each attempt waits PublishAttempt at most
// (on the one timer of its connection's reply slots, replies.go) and is sent again when
// unanswered; a publish no stream answers is tried again every publishRetryWait for
// publishNoStream (RetryNoStream's rule). A cancellation of ctx is seen between attempts.
func PublishWithin(ctx context.Context, nc *nats.Conn, m *nats.Msg, within time.Duration) (jetstream.PubAck, error) {
	resp, err := request(ctx, nc, m, publishDeadline(ctx, within))
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return jetstream.PubAck{}, fmt.Errorf("publish on %s: %w", m.Subject, jetstream.ErrNoStreamResponse)
	case err != nil:
		return jetstream.PubAck{}, fmt.Errorf("publish on %s: %w", m.Subject, err)
	}
	if ack, ok := parseTemplateAck(resp.Data); ok {
		return ack, nil
	}
	ack, err := ParsePubAck(resp.Data)
	if err != nil {
		return jetstream.PubAck{}, fmt.Errorf("publish on %s: %w", m.Subject, err)
	}
	return *ack, nil
}

// publishDeadline is when a publish within the duration given (none when 0) under ctx ends:
// the earlier of the two, or, with neither, what [bounded] gives a context without a deadline.
func publishDeadline(ctx context.Context, within time.Duration) time.Time {
	deadline, ok := ctx.Deadline()
	if within > 0 {
		if d := time.Now().Add(within); !ok || d.Before(deadline) {
			return d
		}
	}
	if !ok {
		return time.Now().Add(unboundedAttempts * apiAttempt)
	}
	return deadline
}

// request sends m and waits for its answer, sending it again after each attempt of
// publishAttempt that got no answer (until deadline), and again every publishRetryWait while
// no stream answers it (for publishNoStream at most). It returns the answer, or the last
// attempt's error, or ctx's, or context.DeadlineExceeded once deadline passed.
func request(ctx context.Context, nc *nats.Conn, m *nats.Msg, deadline time.Time) (*nats.Msg, error) {
	var giveUp time.Time // when a publish that finds no stream gives up
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		wait := min(publishAttempt, time.Until(deadline))
		if wait <= 0 {
			return nil, context.DeadlineExceeded
		}
		resp, err := sendForReply(nc, m, wait)
		switch {
		case err == nil:
			return resp, nil
		case timedOut(err):
			continue
		case !noStream(err):
			return nil, err
		}
		if giveUp.IsZero() {
			giveUp = time.Now().Add(publishNoStream)
		}
		if !time.Now().Before(giveUp) {
			return nil, err
		}
		if !pauseFor(ctx, min(publishRetryWait, time.Until(deadline))) {
			return nil, ctx.Err()
		}
	}
}

// RetryNoStream runs write, a write to a stream (a publish, a KV write through the library),
// and runs it again every publishRetryWait while no stream answers it (nats.ErrNoResponders,
// jetstream.ErrNoStreamResponse), for up to publishNoStream; it returns write's last error, or
// ctx's when ctx ends first.
func RetryNoStream(ctx context.Context, write func() error) error {
	err := write()
	for giveUp := time.Now().Add(publishNoStream); noStream(err) && time.Now().Before(giveUp); {
		if !pause(ctx) {
			return ctx.Err()
		}
		err = write()
	}
	return err
}

// RetryWrite runs write, a write to a stream that is safe to repeat (a KV put of the same
// value, a compare-and-set whose caller checks what landed), each time within apiAttempt, and
// again after an attempt that got no answer in time or found no stream (Retry and
// RetryNoStream): while a stream elects a leader after a NATS node died, a request sent to it
// is never answered, and one write must not wait for the whole of its caller's deadline.
func RetryWrite(ctx context.Context, write func(context.Context) error) error {
	return Retry(ctx, func(actx context.Context) error {
		return RetryNoStream(actx, func() error { return write(actx) })
	})
}

func noStream(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// UpdateKV writes value under key in bucket if the key's last revision is rev, and returns the
// new revision: jetstream.KeyValue.Update through Publish. A key written since rev (or never
// written) gives an error that matches jetstream.ErrKeyRevisionMismatch and
// jetstream.ErrKeyExists, as Update's does. The write goes to the JetStream js reaches, in its
// domain or behind its API prefix (API.KVPut), as the library's would.
func UpdateKV(ctx context.Context, js jetstream.JetStream, bucket, key string, value []byte, rev uint64) (uint64, error) {
	if err := CheckKey(key); err != nil {
		return 0, err
	}
	m := &nats.Msg{Subject: APIOf(js).KVPut(bucket, key), Data: value, Header: nats.Header{
		jetstream.ExpectedLastSubjSeqHeader: []string{strconv.FormatUint(rev, 10)},
	}}
	ack, err := Publish(ctx, js.Conn(), m)
	var api *jetstream.APIError
	switch {
	case errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
		return 0, fmt.Errorf("update %s in %s at revision %d: %w: %w", key, bucket, rev, err, jetstream.ErrKeyRevisionMismatch)
	case err != nil:
		return 0, fmt.Errorf("update %s in %s: %w", key, bucket, err)
	}
	return ack.Sequence, nil
}

// CheckKey reports whether key is a valid KV key: the characters A-Z a-z 0-9 - _ = / and .,
// with no '.' at either end (jetstream's keyValid, without a regular expression).
func CheckKey(key string) error {
	if key == "" || key[0] == '.' || key[len(key)-1] == '.' {
		return fmt.Errorf("KV key %q: %w", key, jetstream.ErrInvalidKey)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '_' || c == '=' || c == '/' || c == '.') {
			return fmt.Errorf("KV key %q: %w", key, jetstream.ErrInvalidKey)
		}
	}
	return nil
}

// ParsePubAck reads a stream's reply to a publish. The replies of a successful publish that
// nats-server writes from its template, {"stream":"S","seq":N} with an optional "domain" before
// the sequence and "duplicate": true after it, are read directly; any other reply (an error, a
// batch, a counter) is decoded with encoding/json, so the result is the same for every input.
func ParsePubAck(data []byte) (*jetstream.PubAck, error) {
	if ack, ok := parseTemplateAck(data); ok {
		return &ack, nil
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
		jetstream.PubAck
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, fmt.Errorf("%w: %v", jetstream.ErrInvalidJSAck, err)
	}
	if resp.Error != nil {
		return nil, resp.Error
	}
	if resp.Stream == "" {
		return nil, fmt.Errorf("%w: no stream in %q", jetstream.ErrInvalidJSAck, data)
	}
	return &resp.PubAck, nil
}

// parseTemplateAck reads the acknowledgements nats-server writes from its template, or reports
// false for anything else (which the caller then decodes in full). The acknowledgement is a
// value: a publish of the hot path allocates none.
func parseTemplateAck(data []byte) (jetstream.PubAck, bool) {
	var ack jetstream.PubAck
	rest, ok := bytes.CutPrefix(data, []byte(`{"stream":`))
	stream, rest, ok := plainString(rest, ok)
	if !ok || len(stream) == 0 {
		return jetstream.PubAck{}, false
	}
	ack.Stream = intern.Bytes(stream) // one of a few names: not allocated per publish
	if after, found := bytes.CutPrefix(rest, []byte(`,"domain":`)); found {
		var domain []byte
		if domain, rest, ok = plainString(after, true); !ok {
			return jetstream.PubAck{}, false
		}
		ack.Domain = string(domain)
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"seq":`)); !ok {
		return jetstream.PubAck{}, false
	}
	n := 0
	for n < len(rest) && '0' <= rest[n] && rest[n] <= '9' {
		n++
	}
	if n == 0 || n > 1 && rest[0] == '0' {
		return jetstream.PubAck{}, false
	}
	seq, err := strconv.ParseUint(string(rest[:n]), 10, 64)
	if err != nil {
		return jetstream.PubAck{}, false
	}
	ack.Sequence = seq
	switch string(rest[n:]) {
	case `}`:
	case `,"duplicate": true}`, `,"duplicate":true}`:
		ack.Duplicate = true
	default:
		return jetstream.PubAck{}, false
	}
	return ack, true
}

// plainString reads a JSON string without escapes at the start of b (when ok) and returns its
// bytes and what follows it.
func plainString(b []byte, ok bool) ([]byte, []byte, bool) {
	if !ok || len(b) == 0 || b[0] != '"' {
		return nil, nil, false
	}
	end := bytes.IndexByte(b[1:], '"')
	if end < 0 {
		return nil, nil, false
	}
	s := b[1 : 1+end]
	for _, c := range s {
		if c == '\\' || c < 0x20 || c >= 0x80 {
			return nil, nil, false // escapes, control characters or UTF-8: encoding/json reads them
		}
	}
	return s, b[2+end:], true
}
