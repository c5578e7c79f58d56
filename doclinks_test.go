package reins_test

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/doc"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestDocLinks: every [Name] of the public packages' doc comments is a link go doc resolves. A
// link to a name its package does not declare, or to a package the file does not import, is
// shown as the brackets and the text, which go vet does not report. It parses the sources only.
func TestDocLinks(t *testing.T) {
	ps := newDocPackages(".")
	checked := 0
	for _, dir := range ps.dirs(t) {
		p := ps.load(t, dir)
		if p == nil || !isPublic(p.ImportPath) {
			continue
		}
		checked++
		for _, bad := range ps.badLinks(p) {
			t.Error(bad)
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d public packages: the test cannot list the module", checked)
	}
}

// TestDocLinksCatches: the check reports a link to a name nobody declares, one to a package the
// file does not import, and one to a name the imported package does not declare, and no
// resolved link, TOML table, character class or index.
func TestDocLinksCatches(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module "+module+"\n")
	write("other/other.go", "// Package other is linked to.\npackage other\n\n// T is a type.\ntype T struct{}\n\n// M is a method.\nfunc (T) M() {}\n")
	write("pub/pub.go", `// Package pub links [Missing] [other.T.M], [other.Gone], [strings.Builder],
// [strings.Nope], [runner.Config], the tables [limits] and [principals.NAME], the class
// [a-z0-9_-], the index [0], Map[Key] and [Thing.Do].
package pub

import (
	"strings"

	"github.com/reins-run/reins/other"
)

var _ = strings.Builder{}

var _ other.T

// Thing is a thing: see [Thing.Undone] and [*Thing].
type Thing struct {
	// Field is [Missing2].
	Field int
}

// Do does.
func (Thing) Do() {}
`)
	ps := newDocPackages(dir)
	p := ps.load(t, filepath.Join(dir, "pub"))
	got := ps.badLinks(p)
	want := []string{
		"pub/pub.go:1: package pub: [Missing] names nothing pub declares",
		"pub/pub.go:1: package pub: [other.Gone] names nothing package " + module + "/other declares",
		"pub/pub.go:1: package pub: [strings.Nope] names nothing package strings declares",
		"pub/pub.go:1: package pub: [runner.Config] names a package the file does not import: write runner.Config without brackets, or import it",
		"pub/pub.go:16: Thing: [Thing.Undone] names nothing pub declares",
		"pub/pub.go:18: Thing.Field: [Missing2] names nothing pub declares",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("reported:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// docPackages parses the packages of the module under root (and of the standard library, for
// links to it) for their doc comments, once each.
type docPackages struct {
	root   string
	fset   *token.FileSet
	mu     sync.Mutex
	byPath map[string]*docPackage
}

// docPackage is one package's documentation and the files it came from.
type docPackage struct {
	*doc.Package
	files map[string]*ast.File // by file name, relative to the root
}

func newDocPackages(root string) *docPackages {
	return &docPackages{root: root, fset: token.NewFileSet(), byPath: map[string]*docPackage{}}
}

// dirs lists the directories under the root that may hold a package, sorted.
func (ps *docPackages) dirs(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(ps.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != ps.root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// load parses the package in dir (nil: none, or only tests).
func (ps *docPackages) load(t *testing.T, dir string) *docPackage {
	t.Helper()
	rel, err := filepath.Rel(ps.root, dir)
	if err != nil {
		t.Fatal(err)
	}
	path := module
	if rel != "." {
		path += "/" + filepath.ToSlash(rel)
	}
	p, err := ps.parse(path, dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// lookup returns the package of import path path: the module's, or the standard library's
// (nil: another module's, which the check does not read).
func (ps *docPackages) lookup(path string) *docPackage {
	dir := ""
	switch {
	case path == module:
		dir = ps.root
	case strings.HasPrefix(path, module+"/"):
		dir = filepath.Join(ps.root, filepath.FromSlash(strings.TrimPrefix(path, module+"/")))
	case !strings.Contains(strings.Split(path, "/")[0], "."):
		dir = filepath.Join(runtime.GOROOT(), "src", filepath.FromSlash(path))
	default:
		return nil
	}
	p, _ := ps.parse(path, dir)
	return p
}

func (ps *docPackages) parse(path, dir string) (*docPackage, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p, ok := ps.byPath[path]; ok {
		return p, nil
	}
	ps.byPath[path] = nil
	bp, err := build.Default.ImportDir(dir, 0)
	if _, none := err.(*build.NoGoError); none {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	p := &docPackage{files: map[string]*ast.File{}}
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(ps.fset, filepath.Join(dir, name), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
		p.files[filepath.Join(dir, name)] = f
	}
	if p.Package, err = doc.NewFromFiles(ps.fset, files, path, doc.PreserveAST); err != nil {
		return nil, err
	}
	ps.byPath[path] = p
	return p, nil
}

// linkText is what go doc would take for a doc link, had it resolved: [Name], [Name.Name],
// [pkg.Name], [pkg.Name.Name], with an optional *, after a space, punctuation or the start of
// the text (so that Signals[Name], an index, is none); what follows is checked by hand.
var linkText = regexp.MustCompile(`(?:^|[\s\p{P}])\[\*?([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*){0,2})\]`)

// badLinks lists, one sentence each, the links of p's doc comments that do not resolve: a
// [pkg.Name] to a package p's file does not import, or to a name pkg does not declare; a
// [Name] or [Name.Name] to nothing p declares.
func (ps *docPackages) badLinks(p *docPackage) []string {
	var out []string
	for _, c := range p.comments() {
		pos := ps.fset.Position(c.group.Pos())
		file := p.files[pos.Filename]
		where := fmt.Sprintf("%s:%d: %s", ps.rel(pos.Filename), pos.Line, c.what)
		out = append(out, ps.check(p, file, c.group.Text(), where)...)
	}
	return out
}

func (ps *docPackages) rel(name string) string {
	if r, err := filepath.Rel(ps.root, name); err == nil {
		return filepath.ToSlash(r)
	}
	return name
}

// check parses one doc comment as go doc does and returns its unresolved links.
func (ps *docPackages) check(p *docPackage, file *ast.File, text, where string) []string {
	imports := map[string]string{} // the file's imports by the name they go by
	for _, im := range file.Imports {
		path := strings.Trim(im.Path.Value, `"`)
		name := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		} else if q := ps.lookup(path); q != nil {
			name = q.Name
		}
		imports[name] = path
	}
	var out []string
	for _, tx := range texts(p.Parser().Parse(text)) {
		switch tx := tx.(type) {
		case *comment.DocLink:
			if tx.Name == "" || tx.ImportPath == p.ImportPath {
				continue // the parser checked the package's own names
			}
			if q := ps.lookup(tx.ImportPath); q != nil && !q.Parser().LookupSym(tx.Recv, tx.Name) {
				out = append(out, fmt.Sprintf("%s: [%s] names nothing package %s declares", where, linkName(tx), tx.ImportPath))
			}
		case comment.Plain:
			for _, m := range linkText.FindAllStringSubmatchIndex(string(tx), -1) {
				name, rest := string(tx)[m[2]:m[3]], string(tx)[m[1]:]
				if r, _ := utf8.DecodeRuneInString(rest); rest != "" && !unicode.IsSpace(r) && !unicode.IsPunct(r) {
					continue // followed by a letter: no link
				}
				if msg := unresolved(name, p, imports); msg != "" {
					out = append(out, fmt.Sprintf("%s: [%s] %s", where, name, msg))
				}
			}
		}
	}
	return out
}

// unresolved says why the link text name, which the parser left as text, names nothing; "" for
// text that is no link of Go's (a TOML table, a word in brackets).
func unresolved(name string, p *docPackage, imports map[string]string) string {
	parts := strings.Split(name, ".")
	exported := func(s string) bool { return s != "" && 'A' <= s[0] && s[0] <= 'Z' && strings.ToUpper(s) != s }
	switch {
	case len(parts) > 1 && !exported(parts[0]) && exported(parts[1]):
		if _, ok := imports[parts[0]]; ok || !knownPackage(parts[0]) {
			return "" // a link to an imported package's name is a DocLink (checked there)
		}
		return "names a package the file does not import: write " + name + " without brackets, or import it"
	case exported(parts[0]) && slices.IndexFunc(parts[1:], func(s string) bool { return s == "" }) < 0:
		return "names nothing " + p.Name + " declares"
	}
	return ""
}

// knownPackage reports whether name is the name of one of the module's packages, or of a
// package of the standard library or of NATS's that the module uses: a reader takes a
// [name.X] for a link to it.
func knownPackage(name string) bool { return knownPackages()[name] }

var knownPackages = sync.OnceValue(func() map[string]bool {
	known := map[string]bool{"json": true, "http": true, "slog": true, "jetstream": true, "nats": true, "mcp": true}
	_ = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && !strings.HasPrefix(d.Name(), ".") && d.Name() != "testdata" {
			known[d.Name()] = true
		}
		return err
	})
	if ents, err := os.ReadDir(filepath.Join(runtime.GOROOT(), "src")); err == nil {
		for _, e := range ents {
			known[e.Name()] = e.IsDir()
		}
	}
	return known
})

func linkName(l *comment.DocLink) string {
	s := l.Name
	if l.Recv != "" {
		s = l.Recv + "." + s
	}
	if l.ImportPath != "" {
		s = l.ImportPath[strings.LastIndex(l.ImportPath, "/")+1:] + "." + s
	}
	return s
}

// texts returns the inline text of every block of d, links and plain text alike.
func texts(d *comment.Doc) []comment.Text {
	var out []comment.Text
	var add func(ts []comment.Text)
	add = func(ts []comment.Text) {
		for _, t := range ts {
			out = append(out, t)
			switch t := t.(type) {
			case *comment.Link:
				add(t.Text)
			}
		}
	}
	var block func(b comment.Block)
	block = func(b comment.Block) {
		switch b := b.(type) {
		case *comment.Paragraph:
			add(b.Text)
		case *comment.Heading:
			add(b.Text)
		case *comment.List:
			for _, it := range b.Items {
				for _, c := range it.Content {
					block(c)
				}
			}
		}
	}
	for _, b := range d.Content {
		block(b)
	}
	return out
}

// docComment is one doc comment go doc shows, and what it documents.
type docComment struct {
	what  string
	group *ast.CommentGroup
}

// comments lists the doc comments go doc shows of p: the package's, each exported
// declaration's, and each exported field's and interface method's.
func (p *docPackage) comments() []docComment {
	var out []docComment
	add := func(what string, g *ast.CommentGroup) {
		if g != nil {
			out = append(out, docComment{what, g})
		}
	}
	for _, f := range p.files {
		add("package "+p.Name, f.Doc)
	}
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			add(strings.Join(v.Names, ", "), v.Decl.Doc)
			for _, s := range v.Decl.Specs {
				if vs, ok := s.(*ast.ValueSpec); ok && vs.Doc != nil {
					add(vs.Names[0].Name, vs.Doc)
				}
			}
		}
	}
	funcs := func(fs []*doc.Func) {
		for _, f := range fs {
			name := f.Name
			if f.Recv != "" {
				name = strings.TrimLeft(f.Recv, "*") + "." + name
			}
			add(name, f.Decl.Doc)
		}
	}
	values(p.Consts)
	values(p.Vars)
	funcs(p.Funcs)
	for _, t := range p.Types {
		add(t.Name, t.Decl.Doc)
		for _, s := range t.Decl.Specs {
			ts, ok := s.(*ast.TypeSpec)
			if !ok {
				continue
			}
			add(t.Name, ts.Doc)
			var fields *ast.FieldList
			switch x := ts.Type.(type) {
			case *ast.StructType:
				fields = x.Fields
			case *ast.InterfaceType:
				fields = x.Methods
			}
			if fields == nil {
				continue
			}
			for _, fl := range fields.List {
				for _, n := range fl.Names {
					if n.IsExported() {
						add(t.Name+"."+n.Name, fl.Doc)
					}
				}
			}
		}
		values(t.Consts)
		values(t.Vars)
		funcs(t.Funcs)
		funcs(t.Methods)
	}
	slices.SortFunc(out, func(a, b docComment) int { return int(a.group.Pos() - b.group.Pos()) })
	return slices.CompactFunc(out, func(a, b docComment) bool { return a.group == b.group })
}
