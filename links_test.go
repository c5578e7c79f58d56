package reins_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/testkit/mdtest"
)

// mdLink is a Markdown link's target: a path, and an optional #anchor.
var mdLink = regexp.MustCompile(`\]\(([^)\s#]*)(#[^)\s]*)?\)`)

// TestMarkdownLinks: every relative link of the repository's Markdown reaches a file of the
// repository, and every #anchor a heading of the file it names, so that a reader of a clone
// (or of the hosted copy) never follows a link to nothing.
func TestMarkdownLinks(t *testing.T) {
	out, err := exec.Command("git", "ls-files", "*.md").Output()
	if err != nil {
		t.Fatalf("git ls-files (the check reads the repository's Markdown files from git): %v", err)
	}
	anchors := map[string]map[string]bool{}
	checked := 0
	for _, file := range strings.Fields(string(out)) {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(stripCode(string(src)), -1) {
			target, anchor := m[1], strings.TrimPrefix(m[2], "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path := file
			if target != "" {
				path = filepath.Join(filepath.Dir(file), target)
			}
			checked++
			info, err := os.Stat(path)
			if err != nil {
				t.Errorf("%s: the link to %s reaches no file of the repository", file, m[1]+m[2])
				continue
			}
			if anchor == "" || info.IsDir() || !strings.HasSuffix(path, ".md") {
				continue
			}
			if anchors[path] == nil {
				anchors[path] = headingAnchors(t, path)
			}
			if !anchors[path][anchor] {
				t.Errorf("%s: the link %s names no heading of %s", file, m[1]+m[2], path)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: has the pattern stopped matching?")
	}
}

// fence matches a fenced code block, whose text is not Markdown.
var fence = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```")

// stripCode drops fenced code blocks and inline code spans from src.
func stripCode(src string) string {
	src = fence.ReplaceAllString(src, "")
	return regexp.MustCompile("`[^`\n]*`").ReplaceAllString(src, "")
}

// headingAnchors returns the anchors a Markdown renderer gives the headings of path: lower
// case, punctuation dropped, spaces as hyphens, a repeated one numbered (-1, -2, …).
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(fence.ReplaceAllString(string(src), ""), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		a := mdtest.Anchor(text)
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}
