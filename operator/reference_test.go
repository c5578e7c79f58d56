package operator_test

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/testkit/reftest"
	"github.com/reins-run/reins/operator"
)

// serverReference is the page that lists every key of the operator's configuration.
const serverReference = "../docs/reference/server.md"

// knownKeys is the list of keys in the problem of an unknown key.
var knownKeys = regexp.MustCompile(`\(known: ([^)]*)\)`)

// docKey is a documented key: its table ("" for the top level), and the default and the
// example of its row.
type docKey struct {
	table, key, def, example string
	line                     int
}

// parseServerReference reads the key tables of server.md through [reftest.Parse]: the top
// level's under a heading without code ("### Top-level keys"), a table's under "### `[TABLE]`",
// each row "| `key` | type | default | what it does | example |".
func parseServerReference(t *testing.T, text string) (tables map[string][]docKey) {
	t.Helper()
	page, err := reftest.Parse(serverReference, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	tables = map[string][]docKey{}
	for name, keys := range page.Keys() {
		table, open := strings.CutPrefix(name, "[")
		table, closed := strings.CutSuffix(table, "]")
		if name != "" && (!open || !closed) {
			t.Errorf("%s:%d: keys under `%s`: a table's heading names it `[TABLE]`", serverReference, keys[0].Line, name)
			continue
		}
		for _, k := range keys {
			if len(k.Cells) != 5 {
				t.Errorf("%s:%d: a key row is | `key` | type | default | what it does | example |, got %q", serverReference, k.Line, k.Cells)
				continue
			}
			unquote := func(s string) string { return strings.TrimSuffix(strings.TrimPrefix(s, "`"), "`") }
			def := ""
			if strings.HasPrefix(k.Cells[2], "`") && strings.HasSuffix(k.Cells[2], "`") {
				def = unquote(k.Cells[2])
			}
			tables[table] = append(tables[table], docKey{table: table, key: k.Name, def: def, example: unquote(k.Cells[4]), line: k.Line})
		}
	}
	return tables
}

// concrete is a documented table path with its placeholders filled: providers.NAME →
// providers.x, model_limits."MODEL" → model_limits."m".
func concrete(table string) string {
	return strings.NewReplacer(`"MODEL"`, `"m"`, "NAME", "x").Replace(table)
}

// problemKey is the key a problem of table's key names: its quotes are not part of it.
func problemKey(table, key string) string {
	p := strings.ReplaceAll(concrete(table), `"`, "")
	if p == "" {
		return key
	}
	return p + "." + key
}

// decoderKeys asks the decoder which keys table takes: the problem of an unknown key lists them.
func decoderKeys(t *testing.T, table string) []string {
	t.Helper()
	doc := "zz_unknown = 1\n"
	if table != "" {
		doc = "[" + concrete(table) + "]\n" + doc
	}
	_, err := operator.Parse("probe.toml", []byte(doc))
	var ps operator.Problems
	if !errors.As(err, &ps) {
		t.Fatalf("[%s] with an unknown key: got %v, want problems", table, err)
	}
	for _, p := range ps {
		if p.Key == problemKey(table, "zz_unknown") {
			if m := knownKeys.FindStringSubmatch(p.Message); m != nil {
				return strings.Split(m[1], ", ")
			}
		}
	}
	t.Fatalf("[%s]: no problem lists the known keys: %v", table, err)
	return nil
}

// TestServerReference: every key the operator's configuration accepts is documented in
// docs/reference/server.md, and every documented key is accepted with the example its row
// shows.
func TestServerReference(t *testing.T) {
	text, err := os.ReadFile(serverReference)
	if err != nil {
		t.Fatal(err)
	}
	tables := parseServerReference(t, string(text))
	if _, ok := tables[""]; !ok || len(tables) < 2 {
		t.Fatalf("%s: found the tables %v: has its convention changed?", serverReference, slices.Sorted(maps.Keys(tables)))
	}
	for table, rows := range tables {
		documented := map[string]bool{}
		for _, r := range rows {
			documented[r.key] = true
		}
		if table == "" {
			// A table of the file is documented by its own section.
			for other := range tables {
				if other != "" {
					documented[strings.Split(other, ".")[0]] = true
				}
			}
		}
		known := decoderKeys(t, table)
		for _, k := range known {
			if !documented[k] {
				t.Errorf("%s: [%s] does not document the key %s", serverReference, table, k)
			}
		}
		for k := range documented {
			if !slices.Contains(known, k) {
				t.Errorf("%s: [%s] documents %s, which the configuration does not take (it takes: %s)", serverReference, table, k, strings.Join(known, ", "))
			}
		}
		for _, r := range rows {
			checkExample(t, r)
			checkDefault(t, r)
		}
	}
}

// checkExample parses the documented key alone in its table, set to its row's example: no
// problem may name the key.
func checkExample(t *testing.T, r docKey) {
	t.Helper()
	doc := fmt.Sprintf("%s = %s\n", r.key, r.example)
	if r.table != "" {
		doc = "[" + concrete(r.table) + "]\n" + doc
	}
	_, err := operator.Parse("example.toml", []byte(doc))
	var ps operator.Problems
	if err != nil && !errors.As(err, &ps) {
		t.Errorf("%s:%d: %s = %s: %v", serverReference, r.line, r.key, r.example, err)
		return
	}
	key := problemKey(r.table, r.key)
	for _, p := range ps {
		if p.Key == key || strings.HasPrefix(p.Key, key+".") || strings.HasPrefix(p.Key, key+"[") || p.Key == "" {
			t.Errorf("%s:%d: the example of %s is refused: %s", serverReference, r.line, key, p)
		}
	}
}

// checkDefault sets a key whose row gives a default value to it: the configuration must be
// the one without the key.
func checkDefault(t *testing.T, r docKey) {
	t.Helper()
	if r.def == "" {
		return
	}
	header := ""
	if r.table != "" {
		header = "[" + concrete(r.table) + "]\n"
	}
	without, err := operator.Parse("default.toml", []byte(header))
	if err != nil {
		t.Fatalf("[%s] alone: %v", r.table, err)
	}
	with, err := operator.Parse("default.toml", []byte(fmt.Sprintf("%s%s = %s\n", header, r.key, r.def)))
	if err != nil {
		t.Errorf("%s:%d: the default of %s is refused: %v", serverReference, r.line, problemKey(r.table, r.key), err)
		return
	}
	if !reflect.DeepEqual(with, without) {
		t.Errorf("%s:%d: %s = %s is not the default: the configuration differs from one without the key", serverReference, r.line, problemKey(r.table, r.key), r.def)
	}
}

// TestServerReferenceExample: the complete example of server.md loads without a problem.
func TestServerReferenceExample(t *testing.T) {
	var block string
	for _, sec := range reftest.Load(t, serverReference).Sections {
		if _, ok := sec.Starting("A complete example:"); ok && len(sec.Blocks) > 0 {
			block = sec.Blocks[0].Text
		}
	}
	if block == "" {
		t.Fatalf("%s has no complete example", serverReference)
	}
	cfg, err := operator.Parse("server.md", []byte(block))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Providers) != 2 || len(cfg.Principals) != 2 || cfg.TraceURL == "" || len(cfg.Webhooks) != 1 {
		t.Errorf("the example loaded as %+v", cfg)
	}
}
