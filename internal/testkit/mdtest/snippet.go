package mdtest

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Normalize is how a Go sample and its source are compared: every line without its
// indentation and trailing spaces, runs of spaces and tabs inside it as one space, and blank
// lines left out. A sample is cut from a function, so it is indented less than its source, and
// gofmt aligns comments by the lines around them.
func Normalize(src string) string {
	var b strings.Builder
	for l := range strings.SplitSeq(src, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			b.WriteString(strings.Join(f, " "))
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Sources is the Go source of a tree, normalized, to look samples up in.
type Sources map[string]string // the file's path → its normalized text

// ReadSources reads every .go file under root, leaving out directories that start with "." and
// testdata directories' copies of nothing (they are Go too, and read).
func ReadSources(root string) (Sources, error) {
	s := Sources{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		s[path] = "\n" + Normalize(string(src))
		return nil
	})
	return s, err
}

// Find returns the files that hold sample whole, as consecutive lines (Normalize's way), in
// no particular order; none when it is nowhere.
func (s Sources) Find(sample string) []string {
	want := "\n" + Normalize(sample)
	if want == "\n" {
		return nil
	}
	var files []string
	for path, src := range s {
		if strings.Contains(src, want) {
			files = append(files, path)
		}
	}
	return files
}
