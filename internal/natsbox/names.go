package natsbox

import (
	"errors"
	"fmt"
	"strings"

	"github.com/reins-run/reins/internal/intern"
	"github.com/reins-run/reins/internal/wirespec"
)

// The permission lists of docs/deploy.md and docs/security.md are generated from this package's
// permissions (TestPermissionDocs checks them).
//go:generate go test -run ^TestPermissionDocs$ -update-docs .

// Names are the streams, buckets and subjects of one namespace, so that deployments and tenants
// share a NATS account without seeing each other's work. The zero value, NewNames(""), is the
// default namespace: the names of the package's constants, unchanged. In namespace NS every
// subject is prefixed by "NS." (an operator grants a tenant "NS.>"), and every stream, KV bucket
// and object store name by "NS_" ("NS_REINS_TASKS", "NS_reins_runs"). The KV and object store
// subjects follow from the bucket names ("$KV.NS_reins_runs.>").
//
// Production code outside this package names things through the Names of its Box, never through
// the package's constants, which are the default namespace's (TestNamesOnly in
// namespace_test.go checks it).
type Names struct {
	ns      string // the namespace, "" for the default
	subject string // "" or "NS.": prefixes every subject
	name    string // "" or "NS_": prefixes every stream and bucket
}

// MaxNamespaceLen is the longest namespace NewNames accepts: the prefix must leave room in
// stream names (the server's limit is 255 bytes, and a consumer's file path includes them).
const MaxNamespaceLen = 32

// ErrBadNamespace is wrapped by the error of NewNames for a namespace it refuses.
var ErrBadNamespace = errors.New("not a valid namespace")

// NewNames returns the names of namespace: "" for the default one, else 1 to MaxNamespaceLen
// characters of [a-z0-9_-] beginning with a letter or a digit (so that it is one subject token,
// a valid stream name prefix, and a file name on every server's store).
func NewNames(namespace string) (Names, error) {
	if namespace == "" {
		return Names{}, nil
	}
	if err := CheckNamespace(namespace); err != nil {
		return Names{}, err
	}
	return Names{ns: namespace, subject: namespace + ".", name: namespace + "_"}, nil
}

// CheckNamespace reports whether namespace can name a namespace other than the default: 1 to
// MaxNamespaceLen characters of [a-z0-9_-], the first a letter or a digit.
func CheckNamespace(namespace string) error {
	bad := func(why string) error {
		return fmt.Errorf("natsbox: namespace %q is %w: %s", namespace, ErrBadNamespace, why)
	}
	switch {
	case namespace == "":
		return bad("it is empty")
	case namespace[0] == '-' || namespace[0] == '_':
		return bad("it must begin with a lowercase letter or a digit")
	}
	for i, c := range namespace {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return bad(fmt.Sprintf("want only lowercase letters, digits, '-' and '_', and byte %d is %q", i, c))
		}
	}
	if len(namespace) > MaxNamespaceLen { // ASCII by now: bytes are characters
		return bad(fmt.Sprintf("it is %d characters long, more than %d", len(namespace), MaxNamespaceLen))
	}
	return nil
}

// Namespace returns the namespace, "" for the default.
func (n Names) Namespace() string { return n.ns }

// String shows the namespace, "(default)" for the default one.
func (n Names) String() string {
	if n.ns == "" {
		return "(default)"
	}
	return n.ns
}

// Streams.

func (n Names) TasksStream() string  { return n.name + TasksStream }
func (n Names) EventsStream() string { return n.name + EventsStream }
func (n Names) DLQStream() string    { return n.name + DLQStream }

// Buckets and the object store.

func (n Names) RunsBucket() string        { return n.name + RunsBucket }
func (n Names) StatusBucket() string      { return n.name + StatusBucket }
func (n Names) ServedBucket() string      { return n.name + ServedBucket }
func (n Names) CheckpointsBucket() string { return n.name + CheckpointsBucket }
func (n Names) WorkflowsBucket() string   { return n.name + WorkflowsBucket }
func (n Names) EnginesBucket() string     { return n.name + EnginesBucket }
func (n Names) EffectsBucket() string     { return n.name + EffectsBucket }
func (n Names) ValuesBucket() string      { return n.name + ValuesBucket }
func (n Names) RegistryBucket() string    { return n.name + RegistryBucket }
func (n Names) TriggersBucket() string    { return n.name + TriggersBucket }
func (n Names) ConcurrencyBucket() string { return n.name + ConcurrencyBucket }
func (n Names) SessionsBucket() string    { return n.name + SessionsBucket }
func (n Names) LimitsBucket() string      { return n.name + LimitsBucket }

// Streams returns the names of the three streams; Buckets those of the KV buckets, and
// ObjectStores that of the object store: what EnsureLayout creates.
func (n Names) Streams() []string {
	return []string{n.TasksStream(), n.EventsStream(), n.DLQStream()}
}

func (n Names) Buckets() []string {
	return []string{n.RunsBucket(), n.StatusBucket(), n.ServedBucket(), n.CheckpointsBucket(),
		n.WorkflowsBucket(), n.EnginesBucket(), n.EffectsBucket(), n.RegistryBucket(), n.TriggersBucket(), n.ConcurrencyBucket(), n.SessionsBucket(),
		n.LimitsBucket()}
}

func (n Names) ObjectStores() []string { return []string{n.ValuesBucket()} }

// Subject filters of the streams, and of the announcements of ended runs.

func (n Names) TaskSubjects() string   { return n.subject + TaskSubjects }
func (n Names) EventSubjects() string  { return n.subject + EventSubjects }
func (n Names) DLQSubjects() string    { return n.subject + DLQSubjects }
func (n Names) CancelSubjects() string { return n.subject + CancelSubjects }
func (n Names) DeltaSubjects() string  { return n.subject + DeltaSubjects }

// TaskSubjectPrefix begins the subject of every task; CancelSubjectPrefix that of every
// announcement of an ended run.
func (n Names) TaskSubjectPrefix() string   { return n.subject + TaskSubjectPrefix }
func (n Names) CancelSubjectPrefix() string { return n.subject + cancelPrefix }

// KeeperSubject is the subject of the keeper message of the task stream (KeeperSubject).
func (n Names) KeeperSubject() string { return n.subject + KeeperSubject }

// TaskSubject returns the subject of the tasks of handler: "[NS.]reins.task.HANDLER".
func (n Names) TaskSubject(handler string) (string, error) {
	return handlerSubject(n.TaskSubjectPrefix(), handler)
}

// DLQSubject returns the subject of the dead tasks of handler: "[NS.]reins.dlq.HANDLER".
func (n Names) DLQSubject(handler string) (string, error) {
	return handlerSubject(n.subject+dlqPrefix, handler)
}

// CancelSubject returns the subject on which the end of run runID is announced:
// "[NS.]reins.cancel.RUNID".
func (n Names) CancelSubject(runID string) (string, error) {
	return subject(n.CancelSubjectPrefix(), "run id", runID)
}

// DeltaSubject returns the core NATS subject of the token deltas of run runID (a sub-run's too):
// "[NS.]reins.delta.RUNID".
func (n Names) DeltaSubject(runID string) (string, error) {
	return subject(n.subject+deltaPrefix, "run id", runID)
}

// EventSubject returns the subject of the events of run runID: "[NS.]reins.event.NN.RUNID", NN
// its partition. It is the same string each time for a run (internal/intern): a worker puts
// every answer of a run on it, and it was an allocation of every iteration.
func (n Names) EventSubject(runID string) (string, error) {
	if err := checkToken(runID); err != nil {
		return "", fmt.Errorf("natsbox: run id %w", err)
	}
	var buf [128]byte
	b := append(append(buf[:0], n.subject...), eventPrefix...)
	b = append(appendPartitionToken(b, Partition(runID)), '.')
	return intern.Bytes(append(b, runID...)), nil
}

// PartitionSubjects returns the subject filter of the events of partition p:
// "[NS.]reins.event.NN.>".
func (n Names) PartitionSubjects(p int) string {
	return n.subject + eventPrefix + PartitionToken(p) + ".>"
}

// EventPrefixLen is the length of the subject of an event up to its run id:
// "[NS.]reins.event.NN.".
func (n Names) EventPrefixLen() int { return len(n.subject) + len(eventPrefix) + 3 }

// EngineKind is the kind of the engine's own subject of a run (EngineSubject): the events only
// the engine makes about runs travel on it, and the server lets no principal publish on it but
// the engine's identity and admins (Permissions grants it to no other role).
const EngineKind = wirespec.EngineKind

// EngineSubject returns the subject on which the engine publishes the events only it makes
// about run runID (the start of a sub-run or of a trigger's run, child_finished, the cancel of
// a sub-run, ticks, granted): "[NS.]reins.event.NN.RUN.engine". It has five tokens where a
// worker's has four and a person's six, so that no role's grant covers it.
func (n Names) EngineSubject(runID string) (string, error) {
	subj, err := n.EventSubject(runID)
	if err != nil {
		return "", err
	}
	return subj + "." + EngineKind, nil
}

// PrincipalSubject returns the subject on which principal publishes an event of kind
// (SubmitKind or HumanKind) for run runID: "[NS.]reins.event.NN.RUN.KIND.PRINCIPAL".
func (n Names) PrincipalSubject(runID, kind, principal string) (string, error) {
	subj, err := n.EventSubject(runID)
	if err != nil {
		return "", err
	}
	if kind != SubmitKind && kind != HumanKind {
		return "", fmt.Errorf("natsbox: %q is not a kind of principal subject (%s, %s)", kind, SubmitKind, HumanKind)
	}
	if err := CheckToken(principal); err != nil {
		return "", fmt.Errorf("natsbox: principal %q: %w", principal, err)
	}
	return subj + "." + kind + "." + principal, nil
}

// RunEventFilters are the subject filters of every event of run runID: workers', the
// engine's, and those principals published.
func (n Names) RunEventFilters(runID string) ([]string, error) {
	subj, err := n.EventSubject(runID)
	if err != nil {
		return nil, err
	}
	return []string{subj, subj + ".>"}, nil
}

// ParseEventSubject splits the subject of an event of the events stream: the run id, and for
// an event a principal published, its kind and the principal; for the engine's own subject
// (EngineSubject), kind EngineKind and principal EngineName. ok is false for any other shape
// (another namespace's subject among them), and for a run id in another partition than its own
// (a forged subject).
func (n Names) ParseEventSubject(subject string) (runID, kind, principal string, ok bool) {
	// Without strings.Split: the engine parses the subject of every event it decides.
	rest, found := strings.CutPrefix(subject, n.subject)
	if !found {
		return "", "", "", false
	}
	rest, found = strings.CutPrefix(rest, eventPrefix)
	if !found {
		return "", "", "", false
	}
	part, rest, found := strings.Cut(rest, ".")
	if !found {
		return "", "", "", false
	}
	run, rest, more := strings.Cut(rest, ".")
	if run == "" || part != PartitionToken(Partition(run)) {
		return "", "", "", false
	}
	if !more {
		return run, "", "", true
	}
	if rest == EngineKind {
		return run, EngineKind, EngineName, true
	}
	kind, who, ok := strings.Cut(rest, ".")
	if !ok || who == "" || strings.Contains(who, ".") || kind != SubmitKind && kind != HumanKind {
		return "", "", "", false
	}
	return run, kind, who, true
}

// SubjectPartition returns the partition of an event's subject ("[NS.]reins.event.NN. …"), and
// false for a subject of another shape.
func (n Names) SubjectPartition(subject string) (int, bool) {
	rest, found := strings.CutPrefix(subject, n.subject)
	if !found {
		return 0, false
	}
	rest, found = strings.CutPrefix(rest, eventPrefix)
	if !found || len(rest) < 3 || rest[2] != '.' || rest[0] < '0' || rest[0] > '9' || rest[1] < '0' || rest[1] > '9' {
		return 0, false
	}
	p := int(rest[0]-'0')*10 + int(rest[1]-'0')
	return p, p < Partitions
}

// KVSubject is the subject of key in the KV bucket named bucket (a name of these Names).
func (n Names) KVSubject(bucket, key string) string { return KVSubject(bucket, key) }

// TenantPermissions are the NATS permissions of a user that runs everything of namespace n
// (engines, workers and clients) and reaches nothing of another namespace: its subjects, the
// JetStream API of its streams, buckets and object store, their KV and object subjects, and the
// replies. An operator who shares one account among tenants gives each tenant's user these
// (docs/deploy.md, Namespaces); in the default namespace they cover "reins.>".
func (n Names) TenantPermissions() *Perms {
	own := n.subject
	if own == "" {
		own = "reins."
	}
	pub := []string{own + ">", "$JS.API.INFO", "$SYS.REQ.USER.INFO", "$JS.FC.>"}
	streams := n.Streams()
	for _, b := range n.Buckets() {
		streams = append(streams, KVStream(b))
		pub = append(pub, KVSubject(b, ">"))
	}
	for _, o := range n.ObjectStores() {
		streams = append(streams, "OBJ_"+o)
		pub = append(pub, "$O."+o+".>")
	}
	for _, s := range streams {
		// $JS.API.STREAM.CREATE.S, $JS.API.CONSUMER.CREATE.S.C, $JS.API.DIRECT.GET.S.…,
		// $JS.API.STREAM.MSG.GET.S, $JS.API.CONSUMER.MSG.NEXT.S.C: the stream's name is the
		// fifth or the sixth token.
		pub = append(pub, "$JS.API.*.*."+s, "$JS.API.*.*."+s+".>", "$JS.API.*.*.*."+s, "$JS.API.*.*.*."+s+".>", "$JS.ACK."+s+".>")
	}
	return &Perms{PublishAllow: pub, SubscribeAllow: []string{"_INBOX.>", own + ">"}}
}
