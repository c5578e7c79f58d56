package natsbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The consumer proxy: how principals (every connection but the engine's and admins') create and
// remove JetStream consumers. A consumer is the server's own authority to deliver stored
// messages: a push consumer to any deliver subject, a durable one for as long as the stream
// lives. A principal's account (PrincipalAccount) imports the consumer operations of the
// JetStream API from the proxy, which forwards one only if
//
//   - the principal's permissions (Names.Permissions) allow the operation on its stream;
//   - it is not durable (but a worker's consumer of a handler's tasks, WorkerConsumerName), and
//     goes idle away within MaxConsumerIdle (its inactive_threshold, set when absent);
//   - it delivers nowhere (a pull consumer) or to the principal's inboxes ("_INBOX.…"), which
//     the proxy turns into a subject of the principal's alone (PrincipalDeliverPrefix);
//   - its filters are subjects of its stream, and it names no other field the proxy does not
//     know;
//   - the principal has fewer than its cap of consumers (ProxyConfig.MaxPerPrincipal).
//
// It names the principal in the consumer's metadata (OwnerKey), counts the principal's
// consumers by it, and removes a consumer only for its owner. A refusal is an API error whose
// description is one sentence naming the principal and what it may not do.

// MaxConsumerIdle bounds how long a principal's consumer outlives its last client: the
// proxy lowers a longer inactive_threshold to it. DefaultConsumerIdle is the threshold it sets
// when a request gives none (nats-server's default for ephemeral consumers).
const (
	MaxConsumerIdle     = 5 * time.Minute
	DefaultConsumerIdle = 5 * time.Second
)

// DefaultMaxConsumersPerPrincipal is how many consumers a principal may hold at once when the
// operator sets no cap ([limits] max_consumers_per_principal).
const DefaultMaxConsumersPerPrincipal = 64

// OwnerKey is the metadata key naming the principal a consumer was created for.
const OwnerKey = "reins.principal"

// WorkerConsumerPrefix begins the name of the durable consumer of each handler's tasks:
// "reins-worker-NAME" (WorkerConsumerName).
const WorkerConsumerPrefix = "reins-worker-"

// WorkerConsumerName is the durable consumer of the tasks of handler: WorkerConsumerPrefix and
// the handler's name with '_' written "__" and '.' written "_d" (a consumer name has no dots).
func WorkerConsumerName(handler string) string {
	return WorkerConsumerPrefix + strings.NewReplacer("_", "__", ".", "_d").Replace(handler)
}

// ProxyConfig says whom a consumer proxy serves.
type ProxyConfig struct {
	// Principal returns the identity of a principal by name; false refuses its requests.
	Principal func(name string) (Identity, bool)
	// MaxPerPrincipal caps the consumers a principal holds at once (0:
	// DefaultMaxConsumersPerPrincipal).
	MaxPerPrincipal int
	// Logger receives one line per refusal (nil: none).
	Logger *slog.Logger
}

// proxyAnswer bounds the wait for the JetStream API's answer to a forwarded request.
const proxyAnswer = 5 * time.Second

// proxyWorkers bounds the requests the proxy serves at once; more wait in the subscription.
const proxyWorkers = 16

// ServeConsumerProxy answers the consumer proxy's requests of b's namespace on b's connection
// (in a queue group, so that several processes share them) until ctx ends or the connection
// closes; the returned function stops it. The connection must have the engine's or an
// admin's permissions. A Box that runs an embedded server with Options.Authenticate serves
// its own; a process on an external server whose principals have accounts like PrincipalAccount
// (docs/deploy.md) calls it.
func ServeConsumerProxy(ctx context.Context, b *Box, cfg ProxyConfig) (stop func(), err error) {
	if cfg.MaxPerPrincipal <= 0 {
		cfg.MaxPerPrincipal = DefaultMaxConsumersPerPrincipal
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := &consumerProxy{b: b, cfg: cfg, sem: make(chan struct{}, proxyWorkers), locks: map[string]*sync.Mutex{}}
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		stopped bool // no request is counted in wg after stop began
	)
	sub, err := b.nc.QueueSubscribe(b.names.ConsumerProxySubjects(), "reins-consumer-proxy", func(m *nats.Msg) {
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		wg.Add(1)
		mu.Unlock()
		p.sem <- struct{}{}
		go func() {
			defer func() { <-p.sem; wg.Done() }()
			p.serve(ctx, m)
		}()
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("natsbox: the consumer proxy cannot subscribe: %w", err)
	}
	if err := b.nc.Flush(); err != nil {
		cancel()
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("natsbox: the consumer proxy cannot subscribe: %w", err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = sub.Unsubscribe()
			cancel()
			mu.Lock()
			stopped = true
			mu.Unlock()
			wg.Wait()
		})
	}, nil
}

type consumerProxy struct {
	b   *Box
	cfg ProxyConfig
	sem chan struct{}

	mu    sync.Mutex
	locks map[string]*sync.Mutex // one per principal: its count and its creation go together
}

// serve answers one request: the JetStream API's answer to what it forwards, or a refusal.
func (p *consumerProxy) serve(ctx context.Context, m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	answer, err := p.answer(ctx, m)
	if err != nil {
		var r *refusal
		if !errors.As(err, &r) {
			r = &refusal{code: 503, msg: err.Error()}
		}
		p.cfg.Logger.Info("consumer proxy refused a request", "subject", m.Subject, "reason", r.msg)
		answer = &nats.Msg{Data: r.apiError(m.Subject)}
	}
	answer.Subject = m.Reply
	_ = p.b.nc.PublishMsg(answer)
}

// answer checks the request and forwards it.
func (p *consumerProxy) answer(ctx context.Context, m *nats.Msg) (*nats.Msg, error) {
	n := p.b.names
	principal, op, ok := n.proxyRequest(m.Subject)
	if !ok {
		return nil, &refusal{code: 400, msg: fmt.Sprintf("%s is not a request of the consumer proxy", m.Subject)}
	}
	id, ok := p.cfg.Principal(principal)
	if !ok {
		return nil, &refusal{code: 403, msg: fmt.Sprintf("principal %s is not known to this server: it may not create or remove consumers", principal)}
	}
	req, err := checkConsumerRequest(n, id, op, m.Data)
	if err != nil {
		return nil, err
	}
	lock := p.lock(principal)
	lock.Lock()
	defer lock.Unlock()
	switch {
	case req.remove:
		if err := p.checkOwner(ctx, id, req); err != nil {
			return nil, err
		}
	case req.owned:
		if err := p.checkCap(ctx, id); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, proxyAnswer)
	defer cancel()
	resp, err := p.b.nc.RequestWithContext(ctx, p.b.api.Subject(strings.TrimPrefix(req.subject, "$JS.API.")), req.body)
	if err != nil {
		return nil, fmt.Errorf("the JetStream API did not answer the consumer proxy: %w", err)
	}
	return &nats.Msg{Header: resp.Header, Data: resp.Data}, nil
}

func (p *consumerProxy) lock(principal string) *sync.Mutex {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.locks[principal]
	if !ok {
		l = &sync.Mutex{}
		p.locks[principal] = l
	}
	return l
}

// checkCap refuses a consumer over the principal's cap: it counts the consumers its metadata
// names it the owner of, on every stream it may create consumers on.
func (p *consumerProxy) checkCap(ctx context.Context, id Identity) error {
	perms := p.b.names.Permissions(id)
	held := 0
	for _, s := range p.b.names.consumerStreams() {
		if !permitted(perms, "$JS.API.CONSUMER.CREATE."+s+".x") {
			continue
		}
		stream, err := p.b.js.Stream(ctx, s)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("the consumer proxy cannot count the consumers of %s: %w", s, err)
		}
		list := stream.ListConsumers(ctx)
		for info := range list.Info() {
			if info.Config.Metadata[OwnerKey] == id.Name {
				held++
			}
		}
		if err := list.Err(); err != nil {
			return fmt.Errorf("the consumer proxy cannot count the consumers of %s: %w", s, err)
		}
	}
	if held >= p.cfg.MaxPerPrincipal {
		return &refusal{code: 429, msg: fmt.Sprintf("principal %s may not hold more than %d consumers at once (max_consumers_per_principal): it holds %d, each gone once idle for its inactive threshold (at most %s)",
			id.Name, p.cfg.MaxPerPrincipal, held, MaxConsumerIdle)}
	}
	return nil
}

// checkOwner refuses the removal of a consumer another principal owns; one that is not there
// is the JetStream API's to answer.
func (p *consumerProxy) checkOwner(ctx context.Context, id Identity, req proxied) error {
	info, err := p.consumerInfo(ctx, req.stream, req.consumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("the consumer proxy cannot read consumer %s of %s: %w", req.consumer, req.stream, err)
	}
	if owner := info.Config.Metadata[OwnerKey]; owner != id.Name {
		return &refusal{code: 403, msg: fmt.Sprintf("principal %s may not remove consumer %s of %s: only the principal it was created for may", id.Name, req.consumer, req.stream)}
	}
	return nil
}

// consumerInfo reads consumer name of stream, a pull consumer or a push one (the KV watches
// and object reads of nats.go deliver to an inbox).
func (p *consumerProxy) consumerInfo(ctx context.Context, stream, name string) (*jetstream.ConsumerInfo, error) {
	c, err := p.b.js.Consumer(ctx, stream, name)
	if err == nil {
		return c.CachedInfo(), nil
	}
	if !errors.Is(err, jetstream.ErrNotPullConsumer) {
		return nil, err
	}
	pc, err := p.b.js.PushConsumer(ctx, stream, name)
	if err != nil {
		return nil, err
	}
	return pc.CachedInfo(), nil
}

// consumerStreams are the streams a principal may have consumers on: the events, the KV
// buckets and the object stores (the tasks' consumers are the workers' shared durables, not
// counted).
func (n Names) consumerStreams() []string {
	out := []string{n.EventsStream()}
	for _, b := range n.Buckets() {
		out = append(out, KVStream(b))
	}
	for _, o := range n.ObjectStores() {
		out = append(out, "OBJ_"+o)
	}
	return out
}

// refusal is a request the proxy does not forward: an HTTP-like code and one sentence.
type refusal struct {
	code int
	msg  string
}

func (r *refusal) Error() string { return r.msg }

// apiError is the JetStream API's shape of an error answer, which clients read as they read
// the server's own (nats.go's APIError: code, description).
func (r *refusal) apiError(subject string) []byte {
	kind := "consumer_create_response"
	if strings.Contains(subject, ".CONSUMER.DELETE.") {
		kind = "consumer_delete_response"
	}
	data, _ := json.Marshal(map[string]any{
		"type":  "io.nats.jetstream.api.v1." + kind,
		"error": map[string]any{"code": r.code, "description": r.msg},
	})
	return data
}

// proxied is a request the proxy forwards: the JetStream API subject and body, and what it
// checks against the server first.
type proxied struct {
	subject, stream, consumer string
	body                      []byte
	owned                     bool // a consumer the principal will own: counted against its cap
	remove                    bool // a removal: only of the principal's own
}

// consumerFields are the fields of a consumer's configuration a principal may set: those of
// the consumers reins's clients and workers create. Any other is refused (direct, sourcing,
// deliver_group, priority groups, pause_until), and so is any nats-server adds later, until
// someone looks at it.
var consumerFields = map[string]bool{
	"durable_name": true, "name": true, "description": true, "deliver_policy": true, "opt_start_seq": true,
	"opt_start_time": true, "ack_policy": true, "ack_wait": true, "max_deliver": true, "backoff": true,
	"filter_subject": true, "filter_subjects": true, "replay_policy": true, "rate_limit_bps": true,
	"sample_freq": true, "max_waiting": true, "max_ack_pending": true, "flow_control": true,
	"headers_only": true, "max_batch": true, "max_expires": true, "max_bytes": true,
	"deliver_subject": true, "idle_heartbeat": true, "inactive_threshold": true, "num_replicas": true,
	"mem_storage": true, "metadata": true,
}

// checkConsumerRequest checks what principal id asks the proxy: op is the JetStream API
// operation after "$JS.API." ("CONSUMER.CREATE.S.N.F"), body its request. It returns what to
// forward (the body rewritten: deliver subject, inactive threshold, owner, action), or a
// refusal. It does no I/O: the cap and the owner of a consumer to remove are the caller's.
func checkConsumerRequest(n Names, id Identity, op string, body []byte) (proxied, error) {
	subject := "$JS.API." + op
	refuse := func(format string, v ...any) error {
		return &refusal{code: 403, msg: fmt.Sprintf("principal %s may not ", id.Name) + fmt.Sprintf(format, v...)}
	}
	toks := strings.Split(op, ".")
	for _, t := range toks {
		if t == "" {
			return proxied{}, &refusal{code: 400, msg: fmt.Sprintf("principal %s sent %q, which is not a subject", id.Name, subject)}
		}
	}
	switch {
	case len(toks) >= 3 && toks[0] == "CONSUMER" && toks[1] == "DURABLE" && toks[2] == "CREATE":
		return proxied{}, refuse("create durable consumers (%s): its consumers go away once idle", subject)
	case len(toks) == 4 && toks[0] == "CONSUMER" && toks[1] == "DELETE":
		if !permitted(n.Permissions(id), subject) {
			return proxied{}, refuse("remove consumers of %s", toks[2])
		}
		return proxied{subject: subject, stream: toks[2], consumer: toks[3], remove: true}, nil
	case len(toks) >= 3 && toks[0] == "CONSUMER" && toks[1] == "CREATE":
	default:
		return proxied{}, refuse("call %s through the consumer proxy, which creates and removes consumers only", subject)
	}
	stream := toks[2]
	if !permitted(n.Permissions(id), subject) {
		return proxied{}, refuse("create consumers on %s", stream)
	}
	req, cfg, c, err := readCreate(id, stream, body)
	if err != nil {
		return proxied{}, err
	}
	if stream == n.TasksStream() {
		if err := checkTaskConsumer(n, c); err != nil {
			return proxied{}, refuse("create %s on %s: a worker's consumer of tasks is the pull consumer %s…NAME of the handler's tasks %sNAME", err, stream, WorkerConsumerPrefix, n.TaskSubjectPrefix())
		}
		// Written again from what was checked: a key twice, or a field the check did not read,
		// does not reach the server.
		return forward(subject, stream, req, cfg, false)
	}
	if c.durable != "" {
		return proxied{}, refuse("create the durable consumer %q on %s: its consumers go away once idle", c.durable, stream)
	}
	readable, ok := n.streamSubjects(stream)
	if !ok {
		return proxied{}, refuse("create consumers on %s", stream)
	}
	for _, f := range c.filters {
		if !validSubject(f) || !subjectWithin(f, readable) {
			return proxied{}, refuse("filter a consumer of %s on %q: its filters are subjects of the stream (%s)", stream, f, readable)
		}
	}
	if c.deliver != "" {
		if !strings.HasPrefix(c.deliver, inboxPrefix) || !validSubject(c.deliver) || strings.ContainsAny(c.deliver, "*>") {
			return proxied{}, refuse("create a push consumer on %s delivering to %s: consumers deliver to its own inboxes (%s…) or nowhere (pull)", stream, c.deliver, inboxPrefix)
		}
		cfg["deliver_subject"], _ = json.Marshal(n.PrincipalDeliverPrefix(id.Name) + c.deliver)
	}
	idle := c.idle
	if idle <= 0 {
		idle = DefaultConsumerIdle
	}
	cfg["inactive_threshold"], _ = json.Marshal(min(idle, MaxConsumerIdle))
	c.metadata[OwnerKey] = id.Name
	cfg["metadata"], _ = json.Marshal(c.metadata)
	// Created, never updated: a name another principal's consumer has is that one's, whose
	// configuration (its owner) differs from this one.
	req["action"], _ = json.Marshal("create")
	return forward(subject, stream, req, cfg, true)
}

// forward is the request to forward: req with its configuration cfg.
func forward(subject, stream string, req, cfg map[string]json.RawMessage, owned bool) (proxied, error) {
	var err error
	if req["config"], err = json.Marshal(cfg); err != nil {
		return proxied{}, fmt.Errorf("the consumer proxy cannot write the request: %w", err)
	}
	out, err := json.Marshal(req)
	if err != nil {
		return proxied{}, fmt.Errorf("the consumer proxy cannot write the request: %w", err)
	}
	return proxied{subject: subject, stream: stream, body: out, owned: owned}, nil
}

// readCreate reads a request to create a consumer on stream: its members and its
// configuration's, each one the proxy knows, and what the proxy checks of the configuration.
func readCreate(id Identity, stream string, body []byte) (req, cfg map[string]json.RawMessage, c consumerConfig, err error) {
	bad := func(format string, v ...any) error {
		return &refusal{code: 400, msg: fmt.Sprintf("principal %s sent a consumer request on %s ", id.Name, stream) + fmt.Sprintf(format, v...)}
	}
	if json.Unmarshal(body, &req) != nil || req == nil {
		return nil, nil, c, bad("that is not a JSON object")
	}
	for k := range req {
		if k != "stream_name" && k != "config" && k != "action" && k != "pedantic" {
			return nil, nil, c, &refusal{code: 403, msg: fmt.Sprintf("principal %s may not set %q in a consumer request on %s", id.Name, k, stream)}
		}
	}
	var streamName, action string
	if json.Unmarshal(req["stream_name"], &streamName) != nil || streamName != stream {
		return nil, nil, c, bad("whose stream_name is not %s", stream)
	}
	if json.Unmarshal(req["config"], &cfg) != nil || cfg == nil {
		return nil, nil, c, bad("without a config object")
	}
	if raw, ok := req["action"]; ok && json.Unmarshal(raw, &action) != nil {
		return nil, nil, c, bad("whose action is not a string")
	}
	for k := range cfg {
		if !consumerFields[k] {
			return nil, nil, c, &refusal{code: 403, msg: fmt.Sprintf("principal %s may not set %q on a consumer of %s", id.Name, k, stream)}
		}
	}
	if c, err = readConsumerConfig(cfg); err != nil {
		return nil, nil, c, bad("whose config does not read: %v", err)
	}
	return req, cfg, c, nil
}

// consumerConfig is what the proxy reads of a consumer's configuration.
type consumerConfig struct {
	durable, deliver string
	filters          []string
	idle             time.Duration
	metadata         map[string]string
}

func readConsumerConfig(cfg map[string]json.RawMessage) (consumerConfig, error) {
	var c consumerConfig
	fields := []struct {
		key string
		dst any
	}{
		{"durable_name", &c.durable}, {"deliver_subject", &c.deliver}, {"inactive_threshold", &c.idle},
		{"metadata", &c.metadata}, {"filter_subjects", &c.filters},
	}
	for _, f := range fields {
		if raw, ok := cfg[f.key]; ok {
			if err := json.Unmarshal(raw, f.dst); err != nil {
				return c, fmt.Errorf("%s: %w", f.key, err)
			}
		}
	}
	if raw, ok := cfg["filter_subject"]; ok {
		var f string
		if err := json.Unmarshal(raw, &f); err != nil {
			return c, fmt.Errorf("filter_subject: %w", err)
		}
		if f != "" {
			c.filters = append(c.filters, f)
		}
	}
	if c.metadata == nil {
		c.metadata = map[string]string{}
	}
	return c, nil
}

// checkTaskConsumer checks a consumer of the tasks stream: the durable pull consumer of one
// handler's tasks, named after it.
func checkTaskConsumer(n Names, c consumerConfig) error {
	switch {
	case c.deliver != "":
		return errors.New("a push consumer")
	case len(c.filters) != 1:
		return errors.New("a consumer without one filter")
	}
	handler, ok := strings.CutPrefix(c.filters[0], n.TaskSubjectPrefix())
	switch {
	case !ok || CheckHandler(handler) != nil:
		return fmt.Errorf("a consumer of %q", c.filters[0])
	case handler == KeeperHandler:
		return errors.New("a consumer of the keeper message")
	case c.durable != WorkerConsumerName(handler):
		return fmt.Errorf("the consumer %q of handler %s", c.durable, handler)
	}
	return nil
}

// streamSubjects returns the subjects of stream a principal's consumers may filter on.
func (n Names) streamSubjects(stream string) (string, bool) {
	if stream == n.EventsStream() {
		return n.EventSubjects(), true
	}
	for _, b := range n.Buckets() {
		if stream == KVStream(b) {
			return KVSubject(b, ">"), true
		}
	}
	for _, o := range n.ObjectStores() {
		if stream == "OBJ_"+o {
			return "$O." + o + ".>", true
		}
	}
	return "", false
}

// permitted reports whether perms allow publishing on subject: an allow pattern matches it and
// no deny pattern does (nil perms: everything).
func permitted(perms *Perms, subject string) bool {
	if perms == nil {
		return true
	}
	match := func(patterns []string) bool {
		for _, p := range patterns {
			if SubjectMatches(p, subject) {
				return true
			}
		}
		return false
	}
	return match(perms.PublishAllow) && !match(perms.PublishDeny)
}

// validSubject reports whether s is a subject or a filter: tokens that are not empty, have no
// whitespace, and hold a wildcard only whole ("*", and ">" last).
func validSubject(s string) bool {
	toks := strings.Split(s, ".")
	for i, t := range toks {
		switch {
		case t == "" || strings.ContainsAny(t, " \t\r\n\x00"):
			return false
		case t == ">":
			if i != len(toks)-1 {
				return false
			}
		case t != "*" && strings.ContainsAny(t, "*>"):
			return false
		}
	}
	return true
}

// subjectWithin reports whether every subject filter f matches is matched by pattern p (both
// valid: validSubject).
func subjectWithin(f, p string) bool {
	fs, ps := strings.Split(f, "."), strings.Split(p, ".")
	for i, pt := range ps {
		if pt == ">" {
			return i < len(fs)
		}
		if i >= len(fs) {
			return false
		}
		switch ft := fs[i]; {
		case ft == ">":
			return false
		case pt == "*":
		case ft != pt:
			return false
		}
	}
	return len(fs) == len(ps)
}
