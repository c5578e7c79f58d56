//go:build e2e

package e2e

import (
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reins-run/reins/internal/testkit/buildtest"
)

// The container image's promises, kept without a Docker engine: its go build makes a static
// binary (the base image has no C library), and the image's user, with the image's command and
// an environment as empty as the image's, serves runs and completes one: nothing it needs is
// root's or comes from the environment.
func TestContainerImage(t *testing.T) {
	image, err := buildtest.Image()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("static", func(t *testing.T) {
		f, err := elf.Open(bins.reins)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("the binary built as the Dockerfile builds it asks for a dynamic loader: the distroless static image has none")
			}
		}
		if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
			t.Errorf("the binary needs the shared libraries %v (%v): the distroless static image has none", libs, err)
		}
	})

	// The binary built as the image builds it stays without dead weight (BENCHMARKS.md, "Binary
	// size"; the root package's TestNoDeadWeight names the packages that once made it 91 MB).
	t.Run("size", func(t *testing.T) {
		const most = 80_000_000
		fi, err := os.Stat(bins.reins)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > most {
			t.Errorf("the binary built as the Dockerfile builds it is %.1f MB, over %d MB: `go tool nm -size -sort size` on a build without -s -w shows what grew", float64(fi.Size())/1e6, most/1_000_000)
		}
	})

	// The image runs as its USER, the distroless nonroot; the test can become that user only
	// as root, and otherwise runs as itself, which is not root either.
	if image.User != "nonroot:nonroot" && image.User != "nonroot" {
		t.Fatalf("the image's USER is %q: the test knows the uid of the distroless nonroot only", image.User)
	}
	if len(image.Entrypoint) != 1 || filepath.Base(image.Entrypoint[0]) != "reins" || len(image.Cmd) == 0 || image.Cmd[0] != "serve" {
		t.Fatalf("the image runs %q %q, not reins serve", image.Entrypoint, image.Cmd)
	}
	var cred *syscall.Credential
	uid := os.Getuid()
	if uid == 0 {
		uid = buildtest.DistrolessNonroot
		cred = &syscall.Credential{Uid: buildtest.DistrolessNonroot, Gid: buildtest.DistrolessNonroot}
	}
	home, err := os.MkdirTemp("", "reins-image-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	bin := filepath.Join(home, "reins")
	copyFile(t, bins.reins, bin, 0o755)
	copyFile(t, "../examples/refund/workflow.toml", filepath.Join(home, "workflow.toml"), 0o644)
	if err := os.Chmod(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		if err := os.Chown(home, buildtest.DistrolessNonroot, buildtest.DistrolessNonroot); err != nil {
			t.Fatal(err)
		}
	}
	as := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Dir = home
		cmd.Env = []string{"HOME=" + home} // distroless sets HOME, and PATH, which reins does not use
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		return cmd
	}

	// The image's command, its data directory moved to the test's home and its API kept off
	// the port another test may hold.
	data := filepath.Join(home, "data")
	args := append([]string{}, image.Cmd...)
	for i, a := range args {
		if a == "/home/nonroot/data" {
			args[i] = data
		}
	}
	serve := startCmd(t, "reins serve (as the image runs it)", as(append(args, "--listen", "127.0.0.1:0")...))
	serve.waitFor("reins serving", 30*time.Second)

	out, err := as("run", "workflow.toml", "--data", data, "--input", `{"order_id":"O-104"}`).CombinedOutput()
	if err != nil {
		t.Fatalf("reins run as the image's user: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "completed") {
		t.Fatalf("reins run as the image's user did not complete:\n%s", out)
	}
	// Everything the server wrote is its user's: nothing was written as root.
	err = filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) != uid {
			return fmt.Errorf("%s belongs to uid %d, not the image's user %d", path, st.Uid, uid)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}
