package reins_test

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/reins-run/reins"

// layers reads the package table of ARCHITECTURE.md: each package's row, top first. A row may
// name several packages (`provider/openai`, `provider/anthropic`); "(root)" is the module's.
func layers(t *testing.T) map[string]int {
	t.Helper()
	f, err := os.Open("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := regexp.MustCompile("`([a-z0-9/]+)`")
	row := map[string]int{}
	n, inTable := 0, false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "| package | owns | must not |"):
			inTable = true
			continue
		case !inTable || strings.HasPrefix(line, "|---"):
			continue
		case !strings.HasPrefix(line, "| `"):
			inTable = false
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, m := range names.FindAllStringSubmatch(first, -1) {
			path := module + "/" + m[1]
			if strings.Contains(first, "(root)") {
				path = module
			}
			row[path] = n
		}
		n++
	}
	if len(row) < 20 {
		t.Fatalf("ARCHITECTURE.md's package table has %d packages: the test cannot read it", len(row))
	}
	return row
}

// TestLayering: every package imports only the packages above it in ARCHITECTURE.md's table,
// so the house stays as drawn. Examples and test files are not held to it.
func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, v := range violations(layers(t), string(out)) {
		t.Error(v)
	}
}

// TestLayeringCatches: an import up the table, and a package the table does not name, are
// reported.
func TestLayeringCatches(t *testing.T) {
	row := map[string]int{module + "/clock": 0, module + "/engine": 1}
	list := module + "/clock fmt " + module + "/engine\n" + module + "/engine " + module + "/clock\n" + module + "/stray\n" + module + "/examples/x " + module + "/engine\n"
	got := violations(row, list)
	want := []string{"clock imports engine, which is below it in ARCHITECTURE.md's table",
		"package " + module + "/stray is not in ARCHITECTURE.md's table: add its row where its imports put it"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestWorkerLinksNoEngine: a worker program links the worker SDK and what it needs to speak the
// protocol over the public connection, not the engine, the loop, the workflow model (with its
// TOML parser and cron), the process's Prometheus metrics, OpenTelemetry's SDK and exporters
// (with gRPC and protobuf) or a NATS server: what a third-party worker builds and ships stays
// small. Its reins packages are exactly workerLinks.
func TestWorkerLinksNoEngine(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./worker").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, bad := range forbiddenInWorker(string(out)) {
		t.Errorf("package worker links %s", bad)
	}
	for _, v := range unexpected(reinsPackages(string(out), module+"/worker"), workerLinks) {
		t.Errorf("package worker: %s", v)
	}
}

// workerLinks are the reins packages a worker links: the protocol, its codec, the public
// connection and what the connection stands on, and the spans' makers on the OpenTelemetry
// API.
var workerLinks = []string{"conn", "internal/intern", "internal/jsonscan", "internal/natsbox", "internal/natsbox/serverspec",
	"internal/tracing", "internal/wire", "internal/wirespec", "protocol"}

// TestWireLinksOnlyProtocol: the codec of tasks and events links no reins package but the
// protocol's types and three leaves, and no NATS: a program decodes the wire without a connection.
func TestWireLinksOnlyProtocol(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./internal/wire").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, v := range unexpected(reinsPackages(string(out), module+"/internal/wire"), []string{"internal/intern", "internal/jsonscan", "internal/wirespec", "protocol"}) {
		t.Errorf("package internal/wire: %s", v)
	}
	for line := range strings.Lines(string(out)) {
		if pkg := strings.TrimSpace(line); strings.HasPrefix(pkg, "github.com/nats-io/") {
			t.Errorf("package internal/wire links %s", pkg)
		}
	}
}

// unexpected compares the reins packages got (full paths) with want (paths in the module): one
// line for each linked that is not wanted, and for each wanted that is not linked (the list is
// exact, so that it says what a worker links).
func unexpected(got, want []string) []string {
	var out []string
	wanted := map[string]bool{}
	for _, w := range want {
		wanted[module+"/"+w] = true
	}
	linked := map[string]bool{}
	for _, g := range got {
		linked[g] = true
		if !wanted[g] {
			out = append(out, "links "+strings.TrimPrefix(g, module+"/")+", which is not in its list")
		}
	}
	for _, w := range want {
		if !linked[module+"/"+w] {
			out = append(out, "no longer links "+w+": take it off its list")
		}
	}
	return out
}

// TestWorkerLinksNoEngineCatches: each forbidden package, or a package under it, is reported;
// a name that only begins like one is not. A reins package off the list, or one on it not
// linked, is reported.
func TestWorkerLinksNoEngineCatches(t *testing.T) {
	deps := strings.Join([]string{"fmt", module + "/protocol", module + "/engine", module + "/workflow",
		module + "/workflowx", "github.com/pelletier/go-toml/v2/unstable", "github.com/prometheus/client_golang/prometheus",
		"github.com/robfig/cron/v3", "go.opentelemetry.io/otel/trace", "go.opentelemetry.io/otel/sdk/trace",
		"go.opentelemetry.io/otel/exporters/otlp/otlptrace", "google.golang.org/protobuf/proto", "google.golang.org/grpc",
		"github.com/nats-io/nats.go", "github.com/nats-io/nats-server/v2/server"}, "\n")
	got := forbiddenInWorker(deps)
	want := []string{module + "/engine", module + "/workflow", "github.com/pelletier/go-toml/v2/unstable",
		"github.com/prometheus/client_golang/prometheus", "github.com/robfig/cron/v3", "go.opentelemetry.io/otel/sdk/trace",
		"go.opentelemetry.io/otel/exporters/otlp/otlptrace", "google.golang.org/protobuf/proto", "google.golang.org/grpc",
		"github.com/nats-io/nats-server/v2/server"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("forbidden:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	gotList := unexpected([]string{module + "/protocol", module + "/session"}, []string{"protocol", "conn"})
	wantList := []string{"links session, which is not in its list", "no longer links conn: take it off its list"}
	if !slices.Equal(gotList, wantList) {
		t.Errorf("unexpected = %q, want %q", gotList, wantList)
	}
}

// TestProtocolLinksNoReins: the types that cross process boundaries depend on nothing of reins,
// so that a worker, a client or a codec in another module links them alone.
func TestProtocolLinksNoReins(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./protocol").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, bad := range reinsPackages(string(out), module+"/protocol") {
		t.Errorf("package protocol links %s", bad)
	}
}

// TestProtocolLinksNoReinsCatches: every package of the module but the one named is reported,
// and nothing outside the module is, however its path begins.
func TestProtocolLinksNoReinsCatches(t *testing.T) {
	deps := strings.Join([]string{"fmt", "encoding/json", module + "-other/x", module + "/trace",
		module + "/protocol", module + "/internal/intern", module}, "\n")
	got := reinsPackages(deps, module+"/protocol")
	want := []string{module + "/trace", module + "/internal/intern", module}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("reins packages:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// reinsPackages returns the packages of deps (one a line) that belong to the module, but self.
func reinsPackages(deps, self string) []string {
	var out []string
	for line := range strings.Lines(deps) {
		pkg := strings.TrimSpace(line)
		if pkg != self && (pkg == module || strings.HasPrefix(pkg, module+"/")) {
			out = append(out, pkg)
		}
	}
	return out
}

// forbiddenInWorker returns the packages of deps (one a line) a worker must not link.
func forbiddenInWorker(deps string) []string {
	roots := []string{module + "/engine", module + "/runner", module + "/loop", module + "/workflow",
		module + "/metrics", "github.com/pelletier/go-toml", "github.com/robfig/cron", "github.com/prometheus/",
		"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters", "go.opentelemetry.io/proto",
		"google.golang.org/grpc", "google.golang.org/protobuf", "github.com/nats-io/nats-server"}
	var out []string
	for line := range strings.Lines(deps) {
		pkg := strings.TrimSpace(line)
		for _, root := range roots {
			if pkg == root || strings.HasPrefix(pkg, strings.TrimSuffix(root, "/")+"/") {
				out = append(out, pkg)
				break
			}
		}
	}
	return out
}

// violations checks the output of go list (a package and its imports per line) against the
// rows of the table.
func violations(row map[string]int, list string) []string {
	var out []string
	for line := range strings.Lines(list) {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], module+"/examples/") {
			continue
		}
		pkg, imports := fields[0], fields[1:]
		at, ok := row[pkg]
		if !ok {
			out = append(out, "package "+pkg+" is not in ARCHITECTURE.md's table: add its row where its imports put it")
			continue
		}
		for _, imp := range imports {
			if r, ok := row[imp]; ok && r > at {
				out = append(out, strings.TrimPrefix(pkg, module+"/")+" imports "+strings.TrimPrefix(imp, module+"/")+", which is below it in ARCHITECTURE.md's table")
			}
		}
	}
	return out
}
