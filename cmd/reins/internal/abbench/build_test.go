package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The base and the tree are built as the Dockerfile builds the shipped reins.
func TestBuildFlagsAreTheImages(t *testing.T) {
	f, err := os.Open("../../../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var line string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if strings.Contains(sc.Text(), "go build") {
			line = strings.ReplaceAll(sc.Text(), `"`, "")
		}
	}
	if line == "" {
		t.Fatal("the Dockerfile has no go build line")
	}
	for _, want := range append([]string{"CGO_ENABLED=0"}, buildFlags...) {
		if !strings.Contains(line, want) {
			t.Errorf("the Dockerfile builds with %q, which lacks %q", line, want)
		}
	}
}

// gitRepo makes a repository with a.txt committed as "v1", then changed to "v2" and b.txt
// added without a commit; it returns the repository and the commit.
func gitRepo(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	runGit := func(args ...string) string {
		t.Helper()
		out, err := git(context.Background(), dir, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	runGit("init", "-q")
	runGit("config", "user.email", "t@example.invalid")
	runGit("config", "user.name", "t")
	write(t, filepath.Join(dir, "a.txt"), "v1")
	runGit("add", "a.txt")
	runGit("commit", "-q", "-m", "v1")
	write(t, filepath.Join(dir, "a.txt"), "v2")
	write(t, filepath.Join(dir, "b.txt"), "new")
	runGit("add", "b.txt")
	return dir, runGit("rev-parse", "HEAD")
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The base is exported from its commit; the caller's files, index and worktrees stay as they
// were.
func TestExportLeavesTheTreeAlone(t *testing.T) {
	repo, sha := gitRepo(t)
	status := func() string {
		out, err := exec.Command("git", "-C", repo, "status", "--porcelain").Output()
		if err != nil {
			t.Fatal(err)
		}
		wt, _ := exec.Command("git", "-C", repo, "worktree", "list", "--porcelain").Output()
		return string(out) + string(wt)
	}
	before := status()
	dst := filepath.Join(t.TempDir(), "base-src")
	if err := export(context.Background(), repo, sha, dst); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{filepath.Join(dst, "a.txt"): "v1", filepath.Join(repo, "a.txt"): "v2"} {
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Errorf("%s = %q (%v), want %q", path, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dst, "b.txt")); !os.IsNotExist(err) {
		t.Errorf("the uncommitted b.txt is in the base: %v", err)
	}
	if after := status(); after != before {
		t.Errorf("the tree's status changed:\n%s\nwas:\n%s", after, before)
	}
}

func TestBaseNotACommit(t *testing.T) {
	repo, _ := gitRepo(t)
	_, err := buildBase(context.Background(), repo, "nope", t.TempDir(), os.Stderr)
	if err == nil || !strings.Contains(err.Error(), "--base nope: not a commit of the repository at "+repo) {
		t.Errorf("buildBase(nope) = %v", err)
	}
}

// A revision with neither benchmark package gets one sentence naming where it looked.
func TestBuildTestWithoutBenchmarks(t *testing.T) {
	err := buildTest(context.Background(), t.TempDir(), filepath.Join(t.TempDir(), "bench.test"))
	if err == nil || !strings.Contains(err.Error(), "no benchmark package in") || !strings.Contains(err.Error(), "cmd/reins/internal/bench, bench") {
		t.Errorf("err = %v, want one naming the packages looked for", err)
	}
}
