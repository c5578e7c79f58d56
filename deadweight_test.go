package reins_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/testkit/buildtest"
)

// deadWeight are packages the shipped reins must not link, each with why (BENCHMARKS.md,
// "Binary size"). A prefix stands for the packages under it too.
var deadWeight = []struct{ prefix, why string }{
	{"golang.org/x/net/trace", "its /debug/requests page runs html/template, whose method calls by name make the linker keep every exported method of every type (about 33 MB)"},
	{"html/template", "executing a template calls methods by name, so the linker keeps every exported method of every type (about 33 MB)"},
	{"google.golang.org/grpc", "reins exports traces over OTLP/HTTP only; gRPC brings golang.org/x/net/trace with it"},
	{"github.com/grpc-ecosystem/", "the OTLP collector's gRPC gateway: reins only posts to a collector"},
	{"google.golang.org/genproto/", "gRPC's status types: reins speaks no gRPC"},
	{"go.opentelemetry.io/proto/otlp/collector/", "the collector's service package imports gRPC; telemetry posts TracesData, the same message on the wire"},
	{"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp", "it imports the collector's gRPC service; telemetry's own client posts the spans"},
	{"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc", "reins exports traces over OTLP/HTTP only"},
	{"go.opentelemetry.io/contrib/exporters/autoexport", "it links every exporter, gRPC's among them"},
	{"go.opentelemetry.io/contrib/detectors/", "cloud detectors bring their SDKs; OTEL_RESOURCE_ATTRIBUTES describes the process"},
	{"github.com/aws/", "no AWS SDK: nothing of reins calls AWS"},
	{"cloud.google.com/", "no Google Cloud SDK: nothing of reins calls it"},
}

// TestNoDeadWeight: the reins the image ships (./cmd/reins, with the Dockerfile's environment
// and flags) links none of deadWeight, so the binary stays near what it uses (e2e's
// TestContainerImage checks the size itself). It lists packages and builds nothing.
func TestNoDeadWeight(t *testing.T) {
	image, err := buildtest.Image()
	if err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{"list", "-deps"}, image.BuildFlags...), "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./cmd/reins")
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), image.BuildEnv...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) > 0 {
			imports[fields[0]] = fields[1:]
		}
	}
	if len(imports) < 100 {
		t.Fatalf("go list names %d packages: the test cannot read it", len(imports))
	}
	for _, d := range deadWeight {
		var hits []string
		for pkg := range imports {
			if pkg == d.prefix || strings.HasPrefix(pkg, strings.TrimSuffix(d.prefix, "/")+"/") {
				hits = append(hits, pkg)
			}
		}
		if len(hits) > 0 {
			slices.Sort(hits) // the shortest name first: the package itself, if linked
			t.Errorf("reins links %s (%d packages under %s) through %s: %s", hits[0], len(hits), d.prefix,
				strings.Join(importPath(imports, module+"/cmd/reins", hits[0]), " → "), d.why)
		}
	}
}

// importPath is a shortest chain of imports from root to pkg.
func importPath(imports map[string][]string, root, pkg string) []string {
	from := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == pkg {
			var chain []string
			for ; p != ""; p = from[p] {
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			return chain
		}
		for _, q := range imports[p] {
			if _, seen := from[q]; !seen {
				from[q] = p
				queue = append(queue, q)
			}
		}
	}
	return []string{root, "?", pkg}
}
