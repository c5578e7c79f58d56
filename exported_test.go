package reins_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestExportedNamesNoInternalType: no exported identifier of a public package (its type, a
// field, a method's or function's signature, an alias) names a type of an internal package,
// which a program outside the module can neither name nor construct.
func TestExportedNamesNoInternalType(t *testing.T) {
	pkgs := publicPackages(t)
	for _, pkg := range pkgs {
		for _, v := range internalNames(pkg) {
			t.Error(v)
		}
	}
}

// TestExportedNamesCatches: a field, a parameter, a result, an alias and a promoted method
// that name an internal type are each reported; unexported names are not.
func TestExportedNamesCatches(t *testing.T) {
	inner := types.NewPackage(module+"/internal/box", "box")
	boxT := types.NewNamed(types.NewTypeName(token.NoPos, inner, "Box", nil), types.NewStruct(nil, nil), nil)
	pub := types.NewPackage(module+"/pub", "pub")
	scope := pub.Scope()
	ptr := types.NewPointer(boxT)
	cfg := types.NewStruct([]*types.Var{
		types.NewField(token.NoPos, pub, "Box", ptr, false),
		types.NewField(token.NoPos, pub, "hidden", ptr, false),
	}, nil)
	scope.Insert(types.NewNamed(types.NewTypeName(token.NoPos, pub, "Config", nil), cfg, nil).Obj())
	params := types.NewTuple(types.NewVar(token.NoPos, pub, "b", ptr))
	scope.Insert(types.NewFunc(token.NoPos, pub, "Use", types.NewSignatureType(nil, nil, nil, params, nil, false)))
	scope.Insert(types.NewFunc(token.NoPos, pub, "Make", types.NewSignatureType(nil, nil, nil, nil, params, false)))
	scope.Insert(types.NewFunc(token.NoPos, pub, "use", types.NewSignatureType(nil, nil, nil, params, nil, false)))
	scope.Insert(types.NewAlias(types.NewTypeName(token.NoPos, pub, "Alias", nil), boxT).Obj())
	// An unexported internal type embedded in an exported struct: its methods are promoted.
	hidden := types.NewNamed(types.NewTypeName(token.NoPos, inner, "hidden", nil), types.NewStruct(nil, nil), nil)
	hidden.AddMethod(types.NewFunc(token.NoPos, inner, "Self", types.NewSignatureType(types.NewVar(token.NoPos, inner, "h", hidden), nil, nil, nil, types.NewTuple(types.NewVar(token.NoPos, inner, "", hidden)), false)))
	embeds := types.NewStruct([]*types.Var{types.NewField(token.NoPos, inner, "hidden", hidden, true)}, nil)
	scope.Insert(types.NewNamed(types.NewTypeName(token.NoPos, pub, "Wrapped", nil), embeds, nil).Obj())
	scope.Insert(types.NewNamed(types.NewTypeName(token.NoPos, pub, "wrapped", nil), embeds, nil).Obj())
	got := internalNames(pub)
	want := []string{
		"pub.Alias names internal/box.Box",
		"pub.Config.Box names internal/box.Box",
		"pub.Make names internal/box.Box",
		"pub.Use names internal/box.Box",
		"pub.Wrapped.Self names internal/box.hidden",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("reported:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// publicPackages type-checks the module's public packages from the compiler's export data
// (go list -export), so the test needs no source importer.
func publicPackages(t *testing.T) []*types.Package {
	t.Helper()
	cmd := exec.Command("go", "list", "-export", "-deps", "-json=ImportPath,Export,Standard,Module", "./...")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	var public []string
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p struct {
			ImportPath, Export string
			Module             *struct{ Path string }
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
		if p.Module != nil && p.Module.Path == module && isPublic(p.ImportPath) {
			public = append(public, p.ImportPath)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	var pkgs []*types.Package
	for _, path := range public {
		pkg, err := imp.Import(path)
		if err != nil {
			t.Fatalf("import %s: %v", path, err)
		}
		pkgs = append(pkgs, pkg)
	}
	if len(pkgs) < 20 {
		t.Fatalf("found %d public packages: the test cannot list the module", len(pkgs))
	}
	return pkgs
}

// isPublic reports whether a package of the module is one other modules may import and build
// on: not internal, not a command, not the heavy tests or the examples.
func isPublic(path string) bool {
	rel := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
	for _, seg := range strings.Split(rel, "/") {
		if seg == "internal" {
			return false
		}
	}
	first, _, _ := strings.Cut(rel, "/")
	return first != "cmd" && first != "e2e" && first != "examples"
}

// internalNames lists, sorted, each exported identifier of pkg that names an internal type.
func internalNames(pkg *types.Package) []string {
	var found []string
	report := func(where string, typ types.Type) {
		if n := internalIn(typ, map[types.Type]bool{}); n != "" {
			found = append(found, fmt.Sprintf("%s.%s names %s", pkg.Name(), where, n))
		}
	}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		tn, ok := obj.(*types.TypeName)
		if !ok {
			report(name, obj.Type())
			continue
		}
		if tn.IsAlias() {
			report(name, types.Unalias(tn.Type()))
			continue
		}
		switch u := tn.Type().Underlying().(type) {
		case *types.Struct:
			for f := range u.Fields() {
				if f.Exported() {
					report(name+"."+f.Name(), f.Type())
				}
			}
		case *types.Interface:
			for m := range u.Methods() {
				if m.Exported() {
					report(name+"."+m.Name(), m.Type())
				}
			}
		default:
			report(name, u)
		}
		if _, isIface := tn.Type().Underlying().(*types.Interface); isIface {
			continue
		}
		ms := types.NewMethodSet(types.NewPointer(tn.Type()))
		for sel := range ms.Methods() {
			if m := sel.Obj(); m.Exported() {
				report(name+"."+m.Name(), m.Type().(*types.Signature).Params())
				report(name+"."+m.Name(), m.Type().(*types.Signature).Results())
			}
		}
	}
	slices.Sort(found)
	return slices.Compact(found)
}

// internalIn returns the first internal type typ names ("internal/runstore.Store"), or "".
func internalIn(typ types.Type, seen map[types.Type]bool) string {
	if typ == nil || seen[typ] {
		return ""
	}
	seen[typ] = true
	switch t := typ.(type) {
	case *types.Alias:
		if n := internalObj(t.Obj()); n != "" {
			return n
		}
		return internalIn(types.Unalias(t), seen)
	case *types.Named:
		if n := internalObj(t.Obj()); n != "" {
			return n
		}
		for a := range t.TypeArgs().Types() {
			if n := internalIn(a, seen); n != "" {
				return n
			}
		}
	case *types.Pointer:
		return internalIn(t.Elem(), seen)
	case *types.Slice:
		return internalIn(t.Elem(), seen)
	case *types.Array:
		return internalIn(t.Elem(), seen)
	case *types.Chan:
		return internalIn(t.Elem(), seen)
	case *types.Map:
		if n := internalIn(t.Key(), seen); n != "" {
			return n
		}
		return internalIn(t.Elem(), seen)
	case *types.Tuple:
		for v := range t.Variables() {
			if n := internalIn(v.Type(), seen); n != "" {
				return n
			}
		}
	case *types.Signature:
		if n := internalIn(t.Params(), seen); n != "" {
			return n
		}
		return internalIn(t.Results(), seen)
	case *types.Struct:
		for f := range t.Fields() {
			if f.Exported() {
				if n := internalIn(f.Type(), seen); n != "" {
					return n
				}
			}
		}
	case *types.Interface:
		for m := range t.Methods() {
			if n := internalIn(m.Type(), seen); n != "" {
				return n
			}
		}
	}
	return ""
}

// internalObj names obj's package and name when the package is internal to the module.
func internalObj(obj *types.TypeName) string {
	if obj.Pkg() == nil || !strings.HasPrefix(obj.Pkg().Path(), module+"/") || isPublic(obj.Pkg().Path()) {
		return ""
	}
	return strings.TrimPrefix(obj.Pkg().Path(), module+"/") + "." + obj.Name()
}
