package natsbox

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/testkit/allocs"
)

// names lists what a Names says, by what it is, so that the table of TestNewNames compares all
// of it at once.
func names(t *testing.T, n Names) map[string]string {
	t.Helper()
	must := func(s string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return map[string]string{
		"tasks": n.TasksStream(), "events": n.EventsStream(), "dlq": n.DLQStream(),
		"runs": n.RunsBucket(), "status": n.StatusBucket(), "served": n.ServedBucket(),
		"checkpoints": n.CheckpointsBucket(), "workflows": n.WorkflowsBucket(), "engines": n.EnginesBucket(),
		"effects": n.EffectsBucket(), "values": n.ValuesBucket(), "registry": n.RegistryBucket(), "triggers": n.TriggersBucket(), "concurrency": n.ConcurrencyBucket(), "sessions": n.SessionsBucket(),
		"limits":        n.LimitsBucket(),
		"task subjects": n.TaskSubjects(), "event subjects": n.EventSubjects(), "dlq subjects": n.DLQSubjects(),
		"cancel subjects": n.CancelSubjects(), "keeper": n.KeeperSubject(),
		"task":      must(n.TaskSubject("pay.charge")),
		"event":     must(n.EventSubject("r-1")),
		"dead":      must(n.DLQSubject("pay.charge")),
		"cancel":    must(n.CancelSubject("r-1")),
		"delta":     must(n.DeltaSubject("r-1")),
		"deltas":    n.DeltaSubjects(),
		"principal": must(n.PrincipalSubject("r-1", HumanKind, "alice")),
		"partition": n.PartitionSubjects(7),
	}
}

// TestNewNames: the default namespace keeps the names of the package's constants; another
// prefixes every subject with "NS." and every stream and bucket with "NS_"; a bad namespace
// is refused with a sentence naming it.
func TestNewNames(t *testing.T) {
	defaults := map[string]string{
		"tasks": "REINS_TASKS", "events": "REINS_EVENTS", "dlq": "REINS_DLQ",
		"runs": "reins_runs", "status": "reins_status", "served": "reins_served",
		"checkpoints": "reins_checkpoints", "workflows": "reins_workflows", "engines": "reins_engines",
		"effects": "reins_effects", "values": "reins_values", "limits": "reins_limits",
		"task subjects": "reins.task.>", "event subjects": "reins.event.>", "dlq subjects": "reins.dlq.>",
		"cancel subjects": "reins.cancel.>", "keeper": "reins.task.reins-keep",
		"task": "reins.task.pay.charge", "event": "reins.event.11.r-1", "dead": "reins.dlq.pay.charge",
		"cancel": "reins.cancel.r-1", "delta": "reins.delta.r-1", "deltas": "reins.delta.>", "principal": "reins.event.11.r-1.human.alice",
		"partition": "reins.event.07.>",
	}
	prefixed := func(ns string) map[string]string {
		m := map[string]string{}
		for k, v := range defaults {
			if strings.Contains(v, ".") {
				m[k] = ns + "." + v
			} else {
				m[k] = ns + "_" + v
			}
		}
		return m
	}
	for _, tc := range []struct {
		namespace string
		want      map[string]string
		err       string
	}{
		{namespace: "", want: defaults},
		{namespace: "acme", want: prefixed("acme")},
		{namespace: "t-1_prod", want: prefixed("t-1_prod")},
		{namespace: "9lives", want: prefixed("9lives")},
		{namespace: strings.Repeat("a", 32), want: prefixed(strings.Repeat("a", 32))},
		{namespace: strings.Repeat("a", 33), err: `namespace "` + strings.Repeat("a", 33) + `" is not a valid namespace: it is 33 characters long, more than 32`},
		{namespace: "Acme", err: `namespace "Acme" is not a valid namespace: want only lowercase letters, digits, '-' and '_', and byte 0 is 'A'`},
		{namespace: "a.b", err: `namespace "a.b" is not a valid namespace: want only lowercase letters, digits, '-' and '_', and byte 1 is '.'`},
		{namespace: "a b", err: `byte 1 is ' '`},
		{namespace: "a*", err: `byte 1 is '*'`},
		{namespace: "a>", err: `byte 1 is '>'`},
		{namespace: "-a", err: `namespace "-a" is not a valid namespace: it must begin with a lowercase letter or a digit`},
		{namespace: "_a", err: `it must begin with a lowercase letter or a digit`},
		{namespace: "é", err: `byte 0 is 'é'`},
	} {
		n, err := NewNames(tc.namespace)
		if tc.err != "" {
			if err == nil || !errors.Is(err, ErrBadNamespace) || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "\n") {
				t.Errorf("NewNames(%q): error %v, want one line with %q", tc.namespace, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("NewNames(%q): %v", tc.namespace, err)
			continue
		}
		if n.Namespace() != tc.namespace {
			t.Errorf("NewNames(%q).Namespace() = %q", tc.namespace, n.Namespace())
		}
		got := names(t, n)
		for k, want := range tc.want {
			if got[k] != want {
				t.Errorf("NewNames(%q): %s is %q, want %q", tc.namespace, k, got[k], want)
			}
		}
	}
}

// TestNamesParse: each namespace parses the subjects of its own events and no other's.
func TestNamesParse(t *testing.T) {
	a, _ := NewNames("a")
	for _, tc := range []struct {
		n       Names
		subject string
		run     string
		ok      bool
	}{
		{Names{}, "reins.event.11.r-1", "r-1", true},
		{Names{}, "a.reins.event.11.r-1", "", false},
		{a, "a.reins.event.11.r-1", "r-1", true},
		{a, "a.reins.event.11.r-1.human.alice", "r-1", true},
		{a, "reins.event.11.r-1", "", false},
		{a, "b.reins.event.11.r-1", "", false},
		{a, "a.reins.event.12.r-1", "", false}, // another partition than the run's
		{a, "a.reins.event.11.r-1.engine", "r-1", true},
		{a, "a.reins.event.11.r-1.engine.x", "", false},
		{a, "a.reins.event.12.r-1.engine", "", false},
	} {
		run, _, _, ok := tc.n.ParseEventSubject(tc.subject)
		if run != tc.run || ok != tc.ok {
			t.Errorf("%s: ParseEventSubject(%q) = %q, %t; want %q, %t", tc.n, tc.subject, run, ok, tc.run, tc.ok)
		}
		p, ok := tc.n.SubjectPartition(tc.subject)
		if wantOK := strings.HasPrefix(tc.subject, tc.n.subject+"reins.event."); ok != wantOK || ok && p != 11 && p != 12 {
			t.Errorf("%s: SubjectPartition(%q) = %d, %t", tc.n, tc.subject, p, ok)
		}
		if tc.ok && tc.subject[tc.n.EventPrefixLen():][:len(tc.run)] != tc.run {
			t.Errorf("%s: EventPrefixLen %d does not end before the run id of %q", tc.n, tc.n.EventPrefixLen(), tc.subject)
		}
	}
}

// TestEngineSubject: the engine's subject of a run is the run's subject and "engine", parsed
// back as kind EngineKind by EngineName, in every namespace.
func TestEngineSubject(t *testing.T) {
	a, _ := NewNames("a")
	for _, tc := range []struct {
		n    Names
		run  string
		want string
	}{
		{Names{}, "r-1", "reins.event.11.r-1.engine"},
		{a, "r-1", "a.reins.event.11.r-1.engine"},
		{Names{}, "r-1/call/1", "reins.event." + PartitionToken(Partition("r-1/call/1")) + ".r-1/call/1.engine"},
	} {
		subj, err := tc.n.EngineSubject(tc.run)
		if err != nil || subj != tc.want {
			t.Errorf("%s: EngineSubject(%q) = %q, %v; want %q", tc.n, tc.run, subj, err, tc.want)
			continue
		}
		run, kind, who, ok := tc.n.ParseEventSubject(subj)
		if run != tc.run || kind != EngineKind || who != EngineName || !ok {
			t.Errorf("%s: ParseEventSubject(%q) = %q %q %q %t; want %q %q %q", tc.n, subj, run, kind, who, ok, tc.run, EngineKind, EngineName)
		}
	}
	// The events stream and the engine's consumer of the run's partition capture it.
	for _, n := range []Names{{}, a} {
		subj, _ := n.EngineSubject("r-1")
		if !SubjectMatches(n.EventSubjects(), subj) || !SubjectMatches(n.PartitionSubjects(Partition("r-1")), subj) {
			t.Errorf("%s: %s is not captured by the events stream (%s) or its partition's consumer (%s)", n, subj, n.EventSubjects(), n.PartitionSubjects(Partition("r-1")))
		}
	}
	if _, err := (Names{}).EngineSubject("a b"); err == nil {
		t.Error("EngineSubject of a run id that is no subject token: no error")
	}
}

// TestEngineSubjectByRole: no role's permissions let a principal publish on the engine's
// subject of a run: not a worker (whose grant covers the run's own subject), not a submitter
// or an approver (whose grants cover their own names), nor all of them at once; the engine's
// identity and admins may. Checked on the permissions and on a real server.
func TestEngineSubjectByRole(t *testing.T) {
	subj, err := Names{}.EngineSubject("r-1")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := NewNames("a")
	nsSubj, _ := a.EngineSubject("r-1")
	all := []string{RoleSubmitter, RoleApprover, RoleViewer, RoleWorker, "finance"}
	for _, roles := range [][]string{{RoleSubmitter}, {RoleApprover}, {RoleViewer}, {RoleWorker}, {"finance"}, all} {
		for _, tc := range []struct {
			n    Names
			subj string
		}{{Names{}, subj}, {a, nsSubj}} {
			// A principal named like the kind gains nothing: its subjects have six tokens.
			for _, name := range []string{"mallory", EngineKind, EngineName} {
				p := tc.n.Permissions(Identity{Name: name, Roles: roles})
				if p == nil {
					t.Fatalf("roles %v: no permissions (everything)", roles)
				}
				for _, allow := range p.PublishAllow {
					if SubjectMatches(allow, tc.subj) {
						t.Errorf("%s with roles %v may publish on %s (grant %s)", name, roles, tc.subj, allow)
					}
				}
			}
		}
	}
	for _, id := range []Identity{{Name: EngineName, Roles: []string{RoleEngine}}, {Name: "root", Roles: []string{RoleAdmin}}} {
		if p := (Names{}).Permissions(id); p != nil && !slices.ContainsFunc(p.PublishAllow, func(s string) bool { return SubjectMatches(s, subj) }) {
			t.Errorf("%s may not publish on %s", id.Name, subj)
		}
	}
	b := served(t)
	tokens := map[string]bool{"tok-worker": false, "tok-submitter": false, "tok-approver": false, "tok-viewer": false, "tok-nothing": false, "tok-admin": true}
	for token, want := range tokens {
		if got := canPublish(t, b, token, subj); got != want {
			t.Errorf("%s publishing on %s: allowed %t, want %t", testPrincipals[token].Name, subj, got, want)
		}
	}
}

// FuzzParseEventSubject: a subject ParseEventSubject takes is the one its parts make again
// (EventSubject, PrincipalSubject or EngineSubject): no two shapes read alike, and the engine's
// kind is only ever the engine's subject.
func FuzzParseEventSubject(f *testing.F) {
	for _, s := range []string{"reins.event.11.r-1", "reins.event.11.r-1.engine", "reins.event.11.r-1.submit.sam",
		"reins.event.11.r-1.human.engine", "reins.event.11.r-1.engine.x", "reins.event.03.r-1", "a.reins.event.11.r-1.engine",
		"reins.event.11.r-1.submit.reins-engine", "", "reins.event.", "reins.event.11..engine"} {
		f.Add("", s)
		f.Add("a", s)
	}
	f.Fuzz(func(t *testing.T, ns, subject string) {
		n, err := NewNames(ns)
		if err != nil {
			return
		}
		run, kind, who, ok := n.ParseEventSubject(subject)
		if !ok {
			return
		}
		var again string
		switch kind {
		case "":
			again, err = n.EventSubject(run)
		case EngineKind:
			if who != EngineName {
				t.Fatalf("%q: the engine's subject by %q", subject, who)
			}
			again, err = n.EngineSubject(run)
		default:
			again, err = n.PrincipalSubject(run, kind, who)
		}
		if err != nil && CheckToken(run) == nil && (kind == EngineKind || kind == "" || CheckToken(who) == nil) {
			t.Fatalf("%q parsed as %q %q %q, whose subject cannot be made: %v", subject, run, kind, who, err)
		}
		if err == nil && again != subject { // else: no client can publish on it (whitespace)
			t.Fatalf("%q parsed as %q %q %q, which makes %q", subject, run, kind, who, again)
		}
	})
}

// FuzzNewNames: a namespace NewNames accepts makes subjects whose tokens are valid and stream
// names the server accepts; one it refuses says why in one line.
func FuzzNewNames(f *testing.F) {
	for _, s := range []string{"", "a", "acme-prod", "A", "a.b", "-x", strings.Repeat("z", 40), "a\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ns string) {
		n, err := NewNames(ns)
		if err != nil {
			if strings.Contains(err.Error(), "\n") || !errors.Is(err, ErrBadNamespace) {
				t.Fatalf("NewNames(%q): %v", ns, err)
			}
			return
		}
		if ns != "" {
			if err := CheckToken(ns); err != nil {
				t.Fatalf("namespace %q accepted but not a subject token: %v", ns, err)
			}
		}
		for _, s := range append(n.Streams(), n.Buckets()...) {
			if strings.ContainsAny(s, ".*> \t\r\n/\\") {
				t.Fatalf("namespace %q: stream or bucket name %q", ns, s)
			}
		}
	})
}

// TestNamespacedLayout: EnsureLayout with a namespace's names makes that namespace's streams
// and buckets beside the default's, and the embedded server grants a principal's roles in the
// Box's namespace only.
func TestNamespacedLayout(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Authenticate: principalAuth, Namespace: "acme"})
	if b.Names().Namespace() != "acme" {
		t.Fatalf("Box.Names is %s, want acme", b.Names())
	}
	c, err := b.Connect(testCtx(t), "second")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Names() != b.Names() {
		t.Errorf("Connect's Box is in namespace %s, want acme", c.Names())
	}
	ensure(t, b.JetStream())
	if err := EnsureLayout(testCtx(t), b.JetStream(), b.Layout()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for name := range b.JetStream().StreamNames(testCtx(t)).Name() {
		got = append(got, name)
	}
	var want []string
	for _, n := range []Names{{}, b.Names()} {
		want = append(want, n.Streams()...)
		for _, bucket := range n.Buckets() {
			want = append(want, "KV_"+bucket)
		}
		want = append(want, "OBJ_"+n.ValuesBucket())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("streams:\n%v\nwant:\n%v", got, want)
	}
	s, err := b.JetStream().Stream(testCtx(t), "acme_REINS_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetLastMsgForSubject(testCtx(t), "acme.reins.task.reins-keep"); err != nil {
		t.Errorf("the namespace's keeper message: %v", err)
	}
	if info := s.CachedInfo(); !slices.Equal(info.Config.Subjects, []string{"acme.reins.task.>"}) {
		t.Errorf("acme_REINS_TASKS has subjects %v", info.Config.Subjects)
	}
	for _, tc := range []struct {
		token, subject string
		want           bool
	}{
		{"tok-worker", "acme.reins.event.11.r-1", true},
		{"tok-worker", "reins.event.11.r-1", false},
		{"tok-worker", "$KV.acme_reins_checkpoints.k", true},
		{"tok-worker", "$KV.reins_checkpoints.k", false},
		{"tok-submitter", "acme.reins.event.11.r-1.submit.sam", true},
		{"tok-submitter", "reins.event.11.r-1.submit.sam", false},
		{"tok-approver", "acme.reins.event.11.r-1.human.alice", true},
		{"tok-approver", "reins.event.11.r-1.human.alice", false},
	} {
		if got := canPublish(t, b, tc.token, tc.subject); got != tc.want {
			t.Errorf("%s publishing on %s: stored %t, want %t", tc.token, tc.subject, got, tc.want)
		}
	}
}

// TestOpenRefusesBadNamespace: Open refuses a bad namespace before it starts anything.
func TestOpenRefusesBadNamespace(t *testing.T) {
	_, err := Open(testCtx(t), Options{DataDir: t.TempDir(), Namespace: "Bad"})
	if !errors.Is(err, ErrBadNamespace) {
		t.Fatalf("Open: %v, want ErrBadNamespace", err)
	}
}

// TestEventSubjectOnce: a run's event subject is what it always was, in every namespace and for
// every partition; a run id that is no subject token has none; and the subject of a run seen
// before is taken again without allocating (a worker answers every iteration on it).
func TestEventSubjectOnce(t *testing.T) {
	team, err := NewNames("team")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []Names{{}, team} {
		for _, run := range append(runIDsOfEveryPartition(), "r-2/call/1", strings.Repeat("r", 200)) {
			got, err := n.EventSubject(run)
			want := n.subject + "reins.event." + PartitionToken(Partition(run)) + "." + run
			if got != want || err != nil {
				t.Fatalf("%s: the subject of run %s: %q, %v; want %q", n, run, got, err, want)
			}
		}
		if _, err := n.EventSubject("r.1"); err == nil {
			t.Errorf("%s: a run id that is no subject token was given a subject", n)
		}
		if a := allocs.PerRun(100, func() { _, _ = n.EventSubject("r-1") }); a != 0 {
			t.Errorf("%s: a run's subject taken again allocates %v times, want 0", n, a)
		}
	}
}

// runIDsOfEveryPartition returns one run id in each partition.
func runIDsOfEveryPartition() []string {
	ids := make([]string, Partitions)
	for i, left := 0, Partitions; left > 0; i++ {
		id := "run-" + strconv.Itoa(i)
		if p := Partition(id); ids[p] == "" {
			ids[p], left = id, left-1
		}
	}
	return ids
}
