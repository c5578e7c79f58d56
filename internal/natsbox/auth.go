package natsbox

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/reins-run/reins/internal/natsbox/serverspec"
	"github.com/reins-run/reins/internal/wirespec"
)

// Roles the embedded server knows: the five of docs/reference/server.md, and RoleEngine, the
// identity of the engine and built-in workers inside the process that runs the server.
const (
	RoleEngine    = "engine"
	RoleAdmin     = "admin"
	RoleSubmitter = "submitter"
	RoleApprover  = "approver"
	RoleViewer    = "viewer"
	RoleWorker    = "worker"
)

// Identity is who an authenticated connection is: a principal's name (a subject token: it
// names the subjects the principal may publish its decisions on) and its roles.
type Identity struct {
	Name  string
	Roles []string
}

// Has reports whether id holds role.
func (id Identity) Has(role string) bool { return slices.Contains(id.Roles, role) }

// Authenticator maps a client's token to its identity; ok false refuses the connection.
type Authenticator func(token string) (id Identity, ok bool)

// EngineName is the principal name of a Box's own connections to its embedded server.
const EngineName = wirespec.EngineName

// The subjects a principal's decisions travel on: EventSubject(run) + ".submit.NAME" for what
// a submitter may do (start, cancel), + ".human.NAME" for what an approver may do (decide,
// resume, signal, cancel). The server's permissions let a principal publish only on its own
// name, so the engine reads who acted from the subject, never from the message.
const (
	SubmitKind = wirespec.SubmitKind
	HumanKind  = wirespec.HumanKind
)

// PrincipalSubject returns the subject on which principal publishes an event of kind
// (SubmitKind or HumanKind) for run runID in the default namespace:
// "reins.event.NN.RUN.KIND.PRINCIPAL".
func PrincipalSubject(runID, kind, principal string) (string, error) {
	return Names{}.PrincipalSubject(runID, kind, principal)
}

// ParseEventSubject is Names.ParseEventSubject in the default namespace.
func ParseEventSubject(subject string) (runID, kind, principal string, ok bool) {
	return Names{}.ParseEventSubject(subject)
}

// SubjectPartition is Names.SubjectPartition in the default namespace.
func SubjectPartition(subject string) (int, bool) { return Names{}.SubjectPartition(subject) }

// RunEventFilters is Names.RunEventFilters in the default namespace.
func RunEventFilters(runID string) ([]string, error) { return Names{}.RunEventFilters(runID) }

// Permissions is Names.Permissions in the default namespace.
func Permissions(id Identity) *Perms { return Names{}.Permissions(id) }

// Permissions returns the NATS permissions of id in namespace n: the union of its roles' (nil,
// everything, for the engine and admin). A role it does not know grants nothing beyond what
// every connection may: ask who it is, and reach its replies.
func (n Names) Permissions(id Identity) *Perms {
	if id.Has(RoleEngine) || id.Has(RoleAdmin) {
		return nil
	}
	var pub, sub []string
	add := func(list *[]string, subjects ...string) {
		for _, s := range subjects {
			if !slices.Contains(*list, s) {
				*list = append(*list, s)
			}
		}
	}
	// Anyone authenticated may ask who it is and whether JetStream is there, so that a
	// principal whose roles grant nothing learns that from reins, not from a timeout.
	add(&pub, "$SYS.REQ.USER.INFO", "$JS.API.INFO")
	add(&sub, "_INBOX.>")
	reader := id.Has(RoleViewer) || id.Has(RoleSubmitter) || id.Has(RoleApprover)
	if reader || id.Has(RoleWorker) {
		add(&pub, "$JS.API.STREAM.INFO.*", "$JS.FC.>")
		add(&pub, kvRead(n.WorkflowsBucket())...)
		add(&pub, objRead(n.ValuesBucket())...)
	}
	if reader {
		add(&pub, kvRead(n.RunsBucket())...)
		add(&pub, kvWatch(n.RunsBucket())...)
		add(&pub, kvRead(n.StatusBucket())...)
		add(&pub, kvWatch(n.StatusBucket())...)
		add(&pub, kvWatch(n.ServedBucket())...)
		// The registered workflows: read, never written (the API writes them, on its own
		// connection, once it validated what it stores).
		add(&pub, kvRead(n.RegistryBucket())...)
		add(&pub, kvWatch(n.RegistryBucket())...)
		// Sessions: listed and shown, like the runs whose conversations they continue; removed
		// only by workers (expired) and admins.
		add(&pub, kvRead(n.SessionsBucket())...)
		add(&pub, kvWatch(n.SessionsBucket())...)
		add(&pub, "$JS.API.CONSUMER.CREATE."+n.EventsStream()+".>", "$JS.API.CONSUMER.DELETE."+n.EventsStream()+".*",
			"$JS.API.CONSUMER.INFO."+n.EventsStream()+".*", "$JS.API.CONSUMER.MSG.NEXT."+n.EventsStream()+".*",
			"$JS.API.DIRECT.GET."+n.EventsStream()+".>", "$JS.API.STREAM.MSG.GET."+n.EventsStream())
	}
	if id.Has(RoleSubmitter) {
		add(&pub, "$KV."+n.WorkflowsBucket()+".>", n.subject+"reins.event.*.*."+SubmitKind+"."+id.Name)
		add(&pub, objWrite(n.ValuesBucket())...) // run inputs too large for a message
	}
	if id.Has(RoleApprover) {
		add(&pub, n.subject+"reins.event.*.*."+HumanKind+"."+id.Name)
	}
	if id.Has(RoleWorker) {
		add(&pub, n.subject+"reins.event.*.*",
			"$JS.API.CONSUMER.CREATE."+n.TasksStream()+".>", "$JS.API.CONSUMER.INFO."+n.TasksStream()+".*",
			"$JS.API.CONSUMER.MSG.NEXT."+n.TasksStream()+".*", "$JS.ACK."+n.TasksStream()+".>",
			"$JS.API.DIRECT.GET."+n.TasksStream()+".>", "$JS.API.STREAM.MSG.GET."+n.TasksStream(),
			"$KV."+n.CheckpointsBucket()+".>", "$KV."+n.EffectsBucket()+".>", "$KV."+n.ServedBucket()+".>", "$KV."+n.SessionsBucket()+".>",
			"$KV."+n.LimitsBucket()+".>")
		add(&pub, objWrite(n.ValuesBucket())...)
		add(&pub, kvRead(n.CheckpointsBucket())...)
		add(&pub, kvWatch(n.CheckpointsBucket())...)
		add(&pub, kvRead(n.EffectsBucket())...)
		add(&pub, kvWatch(n.EffectsBucket())...)
		add(&pub, kvRead(n.SessionsBucket())...)
		add(&pub, kvWatch(n.SessionsBucket())...)
		// The shared rate limits of model providers: every worker reads, watches and writes them.
		add(&pub, kvRead(n.LimitsBucket())...)
		add(&pub, kvWatch(n.LimitsBucket())...)
		add(&pub, n.DeltaSubjects()) // token deltas of streaming steps, core NATS
		add(&sub, n.CancelSubjects())
	}
	// The engine's consumers of REINS_EVENTS are the engine's alone: whoever may create ordered
	// consumers on the stream may not create, change, remove or pull from one of their names.
	// No principal creates a durable consumer the legacy way (its consumers go through the
	// consumer proxy, which refuses durables but a worker's of its tasks).
	deny := []string{"$JS.API.CONSUMER.DURABLE.CREATE.>"}
	for _, name := range EngineConsumers() {
		deny = append(deny, "$JS.API.CONSUMER.CREATE."+n.EventsStream()+"."+name,
			"$JS.API.CONSUMER.CREATE."+n.EventsStream()+"."+name+".>",
			"$JS.API.CONSUMER.DELETE."+n.EventsStream()+"."+name,
			"$JS.API.CONSUMER.MSG.NEXT."+n.EventsStream()+"."+name)
	}
	return &Perms{PublishAllow: pub, PublishDeny: deny, SubscribeAllow: sub}
}

// EngineConsumerPrefix begins the name of the engine's consumer of each partition:
// "reins-engine-NN".
const EngineConsumerPrefix = "reins-engine-"

// EngineAllConsumer is the engine's consumer of every partition at once, which an engine that
// owns them all alone reads instead of the partitions' (package runner).
const EngineAllConsumer = EngineConsumerPrefix + "all"

// EngineConsumers returns the names of the engine's consumers of REINS_EVENTS: each
// partition's, then EngineAllConsumer.
func EngineConsumers() []string {
	names := make([]string, 0, Partitions+1)
	for p := range Partitions {
		names = append(names, EngineConsumerPrefix+PartitionToken(p))
	}
	return append(names, EngineAllConsumer)
}

// kvRead are the JetStream API subjects that read a bucket's keys one by one.
func kvRead(bucket string) []string {
	return []string{"$JS.API.DIRECT.GET.KV_" + bucket + ".>", "$JS.API.STREAM.MSG.GET.KV_" + bucket}
}

// kvWatch are the JetStream API subjects of a watch (an ordered consumer) on a bucket.
func kvWatch(bucket string) []string {
	s := "KV_" + bucket
	return []string{"$JS.API.CONSUMER.CREATE." + s + ".>", "$JS.API.CONSUMER.DELETE." + s + ".*", "$JS.API.CONSUMER.INFO." + s + ".*"}
}

// objRead are the subjects that read an object store's objects: their descriptions, and their
// chunks through an ordered consumer.
func objRead(bucket string) []string {
	s := "OBJ_" + bucket
	return []string{"$JS.API.DIRECT.GET." + s + ".>", "$JS.API.STREAM.MSG.GET." + s,
		"$JS.API.CONSUMER.CREATE." + s + ".>", "$JS.API.CONSUMER.DELETE." + s + ".*", "$JS.API.CONSUMER.INFO." + s + ".*"}
}

// objWrite are the subjects that add objects to an object store: chunks and descriptions. Not
// purges (only the engine removes values), so an object is never replaced: a value's name is
// its digest, and a reader checks the digest of what it reads.
func objWrite(bucket string) []string {
	return []string{"$O." + bucket + ".C.>", "$O." + bucket + ".M.>"}
}

// authenticate is the embedded server's verdict on a client's token: a Box's own token is the
// engine's; any other is auth's to judge, with the permissions of its roles in namespace names
// and an account of its own (PrincipalAccount). seen records every principal it let in, by
// name, for the consumer proxy. A principal whose name is not a subject token is refused: its
// name is a token of its subjects.
func authenticate(own string, auth Authenticator, names Names, seen *sync.Map) func(token string) (string, *Perms, *serverspec.Account, bool) {
	return func(token string) (string, *Perms, *serverspec.Account, bool) {
		var id Identity
		switch {
		case subtleEqual(token, own):
			id = Identity{Name: EngineName, Roles: []string{RoleEngine}}
		case auth != nil:
			var ok bool
			if id, ok = auth(token); !ok || checkToken(id.Name) != nil {
				return "", nil, nil, false
			}
			seen.Store(id.Name, id)
		default:
			return "", nil, nil, false
		}
		return id.Name, names.Permissions(id), names.PrincipalAccount(id), true
	}
}

// newOwnToken returns a random token for a Box's own connections.
func newOwnToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// ErrAuth is wrapped by the errors of a connection the server refused: no token, or a token
// it does not know.
var ErrAuth = errors.New("the NATS server refused the credentials")

// WhoAmI returns the principal name the server knows this connection as, and the subjects it
// may publish on (nil: any).
//
// Only the answer of the server the connection is on counts: other servers that hear the
// request answer too (on a leaf node, its hub answers about the leaf node's own connection to
// it, with no user and none of the client's permissions), and theirs may come first.
func (b *Box) WhoAmI(ctx context.Context) (name string, publish []string, err error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	inbox := b.nc.NewInbox()
	sub, err := b.nc.SubscribeSync(inbox)
	if err != nil {
		return "", nil, fmt.Errorf("natsbox: ask the server who this connection is: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := b.nc.PublishRequest("$SYS.REQ.USER.INFO", inbox, nil); err != nil {
		return "", nil, fmt.Errorf("natsbox: ask the server who this connection is: %w", err)
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return "", nil, fmt.Errorf("natsbox: ask the server who this connection is: %w", err)
		}
		if len(m.Data) == 0 && m.Header.Get("Status") == "503" { // no server answers: nats.go's test
			return "", nil, fmt.Errorf("natsbox: ask the server who this connection is: %w", nats.ErrNoResponders)
		}
		if info, ok := parseUserInfo(m.Data); ok && info.server == b.nc.ConnectedServerId() {
			return info.user, info.publish, info.err
		}
	}
}

// userInfo is a server's answer to "$SYS.REQ.USER.INFO": which server answered, and what it
// says of the connection.
type userInfo struct {
	server, user string
	publish      []string
	err          error
}

// parseUserInfo reads an answer to "$SYS.REQ.USER.INFO"; ok false when it names no server.
func parseUserInfo(data []byte) (info userInfo, ok bool) {
	var resp struct {
		Server struct {
			ID string `json:"id"`
		} `json:"server"`
		Data *struct {
			User        string `json:"user"`
			Permissions *struct {
				Publish *struct {
					Allow []string `json:"allow"`
				} `json:"publish"`
			} `json:"permissions"`
		} `json:"data"`
	}
	if err := json.Unmarshal(data, &resp); err != nil || resp.Server.ID == "" {
		return userInfo{}, false
	}
	info.server = resp.Server.ID
	if resp.Data == nil {
		info.err = errors.New("natsbox: the server did not say who this connection is")
		return info, true
	}
	info.user = resp.Data.User
	if p := resp.Data.Permissions; p != nil && p.Publish != nil {
		info.publish = p.Publish.Allow
	}
	return info, true
}

// subtleEqual compares two tokens in time independent of where they differ.
func subtleEqual(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// SubjectMatches reports whether subject is matched by pattern, a subject with the wildcards
// "*" (one token) and ">" (one or more tokens, last).
func SubjectMatches(pattern, subject string) bool {
	ps, ss := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range ps {
		switch {
		case p == ">":
			return i == len(ps)-1 && len(ss) > i
		case i >= len(ss):
			return false
		case p != "*" && p != ss[i]:
			return false
		}
	}
	return len(ps) == len(ss)
}
