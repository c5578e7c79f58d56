package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// buildEnv and buildFlags build reins as the Dockerfile builds the shipped binary (a test
// holds them to it), for the base and the tree alike.
var (
	buildEnv   = []string{"CGO_ENABLED=0", "GOWORK=off"}
	buildFlags = []string{"-trimpath", "-ldflags=-s -w"}
)

// binary is one side of the comparison: a reins binary and what it was built from.
type binary struct {
	side  string // "base" or "tree"
	path  string
	label string
	test  string // its benchmarks' test binary, with --test-binaries
}

// prepare builds the base revision and the working tree into dir, or takes the binaries the
// flags name.
func prepare(ctx context.Context, cfg config, dir string, stderr io.Writer) (base, tree binary, err error) {
	base = binary{side: "base", path: cfg.baseBin, label: cfg.baseBin}
	tree = binary{side: "tree", path: cfg.treeBin, label: cfg.treeBin}
	buildTests := cfg.testBins && (cfg.baseTest == "" || cfg.treeTest == "")
	if cfg.baseBin != "" && cfg.treeBin != "" && !buildTests {
		base.test, tree.test = cfg.baseTest, cfg.treeTest
		return base, tree, nil // nothing to build
	}
	root, err := git(ctx, cfg.tree, "rev-parse", "--show-toplevel")
	if err != nil {
		return base, tree, fmt.Errorf("--tree %s: not in a git repository: %w", cfg.tree, err)
	}
	if cfg.baseBin == "" {
		if base, err = buildBase(ctx, root, cfg.base, dir, stderr); err != nil {
			return base, tree, err
		}
	}
	if cfg.treeBin == "" {
		if tree, err = buildTree(ctx, root, dir, stderr); err != nil {
			return base, tree, err
		}
	}
	if cfg.testBins {
		base.test, tree.test = cfg.baseTest, cfg.treeTest
		err = prepareTests(ctx, cfg.base, root, dir, &base, &tree, stderr)
	}
	return base, tree, err
}

// prepareTests builds the test binaries the flags do not name: the base's from revision rev
// exported (again, when its reins binary was given), the tree's where it is (root).
func prepareTests(ctx context.Context, rev, root, dir string, base, tree *binary, stderr io.Writer) error {
	if base.test == "" {
		src, _, err := baseSource(ctx, root, rev, dir)
		if err != nil {
			return err
		}
		base.test = filepath.Join(dir, "base", "bench.test")
		fmt.Fprintf(stderr, "abbench: building the base's test binary, %s...\n", rev)
		if err := buildTest(ctx, src, base.test); err != nil {
			return err
		}
	}
	if tree.test == "" {
		tree.test = filepath.Join(dir, "tree", "bench.test")
		fmt.Fprintln(stderr, "abbench: building the tree's test binary...")
		if err := buildTest(ctx, root, tree.test); err != nil {
			return err
		}
	}
	return nil
}

// buildBase exports the revision rev of the repository at root with git archive (the caller's
// tree, index and worktrees untouched) and builds it.
func buildBase(ctx context.Context, root, rev, dir string, stderr io.Writer) (binary, error) {
	src, sha, err := baseSource(ctx, root, rev, dir)
	if err != nil {
		return binary{}, err
	}
	b := binary{side: "base", path: filepath.Join(dir, "base", "reins"), label: fmt.Sprintf("%s (%.12s)", rev, sha)}
	fmt.Fprintf(stderr, "abbench: building the base, %s...\n", b.label)
	return b, build(ctx, src, b.path)
}

// buildTree builds the working tree where it is, uncommitted changes included; go build
// writes only its output and its cache.
func buildTree(ctx context.Context, root, dir string, stderr io.Writer) (binary, error) {
	head, err := git(ctx, root, "rev-parse", "--short=12", "HEAD")
	if err != nil {
		return binary{}, fmt.Errorf("the tree at %s has no HEAD: %w", root, err)
	}
	status, err := git(ctx, root, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return binary{}, err
	}
	b := binary{side: "tree", path: filepath.Join(dir, "tree", "reins"), label: head}
	if status != "" {
		b.label += " with uncommitted changes"
	}
	fmt.Fprintf(stderr, "abbench: building the tree, %s...\n", b.label)
	return b, build(ctx, root, b.path)
}

// baseSource returns the directory in dir holding the files of revision rev of the
// repository at root, and its commit: exported with git archive (the caller's tree, index and
// worktrees untouched) by the first call, and found there by the next.
func baseSource(ctx context.Context, root, rev, dir string) (src, sha string, err error) {
	sha, err = git(ctx, root, "rev-parse", "--verify", "--quiet", rev+"^{commit}")
	if err != nil {
		return "", "", fmt.Errorf("--base %s: not a commit of the repository at %s", rev, root)
	}
	src = filepath.Join(dir, "base-src")
	if _, err := os.Stat(src); err == nil {
		return src, sha, nil
	}
	if err := export(ctx, root, sha, src); err != nil {
		return "", "", fmt.Errorf("--base %s: %w", rev, err)
	}
	return src, sha, nil
}

// export writes the files of the commit sha into the new directory dst.
func export(ctx context.Context, root, sha, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	tarball := dst + ".tar"
	if _, err := git(ctx, root, "archive", "--format=tar", "-o", tarball, sha); err != nil {
		return err
	}
	defer os.Remove(tarball)
	if out, err := exec.CommandContext(ctx, "tar", "-xf", tarball, "-C", dst).CombinedOutput(); err != nil {
		return fmt.Errorf("tar -xf %s: %w: %s", tarball, err, bytes.TrimSpace(out))
	}
	return nil
}

// build builds ./cmd/reins of the module at src into out.
func build(ctx context.Context, src, out string) error {
	return goIn(ctx, src, buildEnv, append(append([]string{"build"}, buildFlags...), "-o", out, "./cmd/reins")...)
}

// goIn runs go with args in the module at src, its environment this process's with env added,
// and returns an error with what go printed when it fails.
func goIn(ctx context.Context, src string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s in %s: %w: %s", strings.Join(args, " "), src, err, bytes.TrimSpace(b))
	}
	return nil
}

// git runs git in dir and returns its output, trimmed.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(string(out)), nil
}
