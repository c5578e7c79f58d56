package reins_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestFuzzTargetsListed: every fuzz target of the module is in CONTRIBUTING.md's table, on a row
// of its own package, so that a contributor finds each parser's fuzzer where the table says.
func TestFuzzTargetsListed(t *testing.T) {
	listed := fuzzTable(t)
	fuzz := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)
	found := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(path))
		for _, m := range fuzz.FindAllSubmatch(src, -1) {
			found++
			if name := string(m[1]); !listed[pkg+" "+name] {
				t.Errorf("%s: %s is not on a row of package `%s` in CONTRIBUTING.md's table of fuzz targets", path, name, pkg)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 50 {
		t.Fatalf("found %d fuzz targets: the walk missed the test files", found)
	}
}

// fuzzTable reads CONTRIBUTING.md's table of fuzz targets: "PACKAGE TARGET" for every target
// named in a row's second cell and package named in its first.
func fuzzTable(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open("CONTRIBUTING.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	code := regexp.MustCompile("`([^`]+)`")
	out := map[string]bool{}
	for sc := bufio.NewScanner(f); sc.Scan(); {
		cells := strings.Split(sc.Text(), " | ")
		if len(cells) < 3 || !strings.HasPrefix(cells[0], "| `") {
			continue
		}
		for _, p := range code.FindAllStringSubmatch(cells[0], -1) {
			for _, target := range code.FindAllStringSubmatch(cells[1], -1) {
				if strings.HasPrefix(target[1], "Fuzz") {
					out[p[1]+" "+target[1]] = true
				}
			}
		}
	}
	if len(out) < 50 {
		t.Fatalf("CONTRIBUTING.md's table of fuzz targets names %d: the test cannot read it", len(out))
	}
	return out
}
