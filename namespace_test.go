package reins_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// defaultNames are the identifiers of package natsbox that name the default namespace's
// streams, buckets and subjects: production code outside natsbox goes through the Names of its
// Box instead (Box.Names), or a process in a namespace would reach the default one's.
var defaultNames = []string{
	"TasksStream", "EventsStream", "DLQStream", "TaskSubjects", "EventSubjects", "DLQSubjects",
	"CancelSubjects", "DeltaSubjects", "TaskSubjectPrefix", "KeeperSubject",
	"RunsBucket", "StatusBucket", "ServedBucket", "CheckpointsBucket", "WorkflowsBucket",
	"EnginesBucket", "EffectsBucket", "ValuesBucket", "RegistryBucket", "TriggersBucket", "TriggersStream", "ConcurrencyBucket",
	"TaskSubject", "EventSubject", "DLQSubject", "CancelSubject", "PartitionSubjects",
	"PrincipalSubject", "ParseEventSubject", "SubjectPartition", "RunEventFilters", "Permissions",
}

// defaultLiterals are pieces of the default namespace's names that a string literal outside
// natsbox must not hold: a name written by hand bypasses Names just as a constant does.
var defaultLiterals = []string{
	"REINS_TASKS", "REINS_EVENTS", "REINS_DLQ", "reins.task.", "reins.event.", "reins.dlq.", "reins.delta.",
	"reins.cancel.", "reins_runs", "reins_status", "reins_served", "reins_checkpoints",
	"reins_workflows", "reins_engines", "reins_effects", "reins_values", "reins_registry", "reins_triggers", "REINS_TRIGGERS", "reins_concurrency", "$KV.", "$O.",
}

// apiLiterals begin the subjects of the JetStream API: one written by hand outside natsbox
// misses a JetStream domain or API prefix (--js-domain, --js-api-prefix), which natsbox.API
// applies.
var apiLiterals = []string{"$JS."}

// TestNamesOnly: production code outside internal/natsbox names streams, buckets and subjects
// through natsbox.Names, never through the default namespace's constants and functions or
// literals, so that nothing bypasses --namespace. Test files, examples and e2e are not held
// to it: they use the default namespace on purpose; nor is package metrics, which names no
// NATS thing (it imports no reins package) but metrics that begin alike.
func TestNamesOnly(t *testing.T) {
	var found []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch path {
			case "internal/natsbox", "e2e", "examples", ".git", "testdata":
				return filepath.SkipDir
			case "metrics": // Prometheus metric names (reins_runs_started_total), not NATS ones
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		bad, err := bypasses(path)
		found = append(found, bad...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Error(f)
	}
}

// TestNamesOnlyCatches: a default constant, a package-level subject builder and a literal
// are reported; a Names method and a comment are not.
func TestNamesOnlyCatches(t *testing.T) {
	src := `package p

import "github.com/reins-run/reins/internal/natsbox"

// natsbox.RunsBucket in a comment is fine.
func f(n natsbox.Names) {
	_ = natsbox.RunsBucket
	_, _ = natsbox.EventSubject("r")
	_ = "$KV.reins_runs.x"
	_ = "$JS.API.STREAM.INFO.S"
	_ = n.RunsBucket()
	_ = natsbox.CheckToken("x")
}
`
	got, err := bypassesIn("p.go", src)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"p.go:7: natsbox.RunsBucket is the default namespace's: use the Names of the Box (Box.Names)",
		"p.go:8: natsbox.EventSubject is the default namespace's: use the Names of the Box (Box.Names)",
		`p.go:9: the literal "$KV.reins_runs.x" names a stream, bucket or subject by hand: use natsbox.Names`,
		`p.go:10: the literal "$JS.API.STREAM.INFO.S" builds a JetStream API subject by hand: use natsbox.API (Box.API), which honours a JetStream domain or API prefix`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func bypasses(path string) ([]string, error) { return bypassesIn(path, nil) }

// bypassesIn reports the uses of the default namespace's names in the Go file path (src: its
// text, nil to read it).
func bypassesIn(path string, src any) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	pkg := ""
	for _, imp := range f.Imports {
		if imp.Path.Value == strconv.Quote(module+"/internal/natsbox") {
			pkg = "natsbox"
			if imp.Name != nil {
				pkg = imp.Name.Name
			}
		}
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && pkg != "" && id.Name == pkg && slices.Contains(defaultNames, n.Sel.Name) {
				found = append(found, fmt.Sprintf("%s:%d: natsbox.%s is the default namespace's: use the Names of the Box (Box.Names)",
					path, fset.Position(n.Pos()).Line, n.Sel.Name))
			}
		case *ast.BasicLit:
			if n.Kind != token.STRING {
				return true
			}
			for _, l := range defaultLiterals {
				if strings.Contains(n.Value, l) {
					found = append(found, fmt.Sprintf("%s:%d: the literal %s names a stream, bucket or subject by hand: use natsbox.Names",
						path, fset.Position(n.Pos()).Line, n.Value))
					break
				}
			}
			for _, l := range apiLiterals {
				if strings.Contains(n.Value, l) {
					found = append(found, fmt.Sprintf("%s:%d: the literal %s builds a JetStream API subject by hand: use natsbox.API (Box.API), which honours a JetStream domain or API prefix",
						path, fset.Position(n.Pos()).Line, n.Value))
					break
				}
			}
		}
		return true
	})
	return found, nil
}
