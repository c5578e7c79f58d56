package main

import (
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestVersionLine: the version line names the module version, the commit (short, "+dirty" for
// a modified work tree) and the Go version, from what the toolchain stamped.
func TestVersionLine(t *testing.T) {
	commit := "77dec2b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6"
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{"tagged", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: commit}, {Key: "vcs.modified", Value: "false"}}},
			true, "reins version v0.3.0 (commit 77dec2b, go1.26.8)"},
		{"clone", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: commit}, {Key: "vcs.modified", Value: "true"}}},
			true, "reins version (devel) (commit 77dec2b+dirty, go1.26.8)"},
		{"no vcs", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			true, "reins version (devel) (unknown commit, go1.26.8)"},
		{"no module", nil, false, "reins version unknown (built without module information)"},
	} {
		if got := versionLine(tc.info, tc.ok); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	// A build without .git (the container image's) may stamp both with -ldflags -X.
	stampedVersion, stampedCommit = "v0.3.0", "77dec2b"
	t.Cleanup(func() { stampedVersion, stampedCommit = "", "" })
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}
	if got, want := versionLine(info, true), "reins version v0.3.0 (commit 77dec2b, go1.26.8)"; got != want {
		t.Errorf("stamped: %q, want %q", got, want)
	}
}

// TestVersionCommands: reins version and reins --version print the same line, this binary's.
func TestVersionCommands(t *testing.T) {
	want := buildVersion() + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errOut := cli(t, args...)
		if code != exitOK || out != want || errOut != "" {
			t.Errorf("reins %s: exit %d, stdout %q, stderr %q; want 0 and %q", args[0], code, out, errOut, want)
		}
	}
	if !strings.HasPrefix(want, "reins ") || !strings.Contains(want, "go1.") {
		t.Errorf("version line %q names neither reins nor the Go version", want)
	}
}

// TestHelpGroups: reins --help lists every command under its group, in the groups' order, and
// leaves only help, completion and version ungrouped.
func TestHelpGroups(t *testing.T) {
	code, out, _ := cli(t, "--help")
	if code != exitOK {
		t.Fatalf("reins --help: exit %d", code)
	}
	at := -1
	for _, g := range commandGroups {
		i := strings.Index(out, "\n"+g.title+"\n")
		if i < 0 || i < at {
			t.Fatalf("group %q is missing or out of order in:\n%s", g.title, out)
		}
		at = i
		section := out[i+len(g.title)+2:]
		section = section[:strings.Index(section, "\n\n")]
		for _, newCmd := range g.commands {
			name := newCmd().Name()
			if !strings.Contains(section, "\n  "+name+" ") && !strings.HasPrefix(section, "  "+name+" ") {
				t.Errorf("command %s is not under %q:\n%s", name, g.title, section)
			}
		}
	}
	for _, c := range newRoot().Commands() {
		if c.GroupID == "" && !slices.Contains([]string{"help", "completion", "version"}, c.Name()) {
			t.Errorf("command %s is in no group", c.Name())
		}
	}
}

// TestEveryCommandHasExample: every command and subcommand shows how it is called.
func TestEveryCommandHasExample(t *testing.T) {
	root := newRoot()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		generated := c.Name() == "help" || c.Name() == "completion" || c.HasParent() && c.Parent().Name() == "completion"
		if !generated && strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s has no Example", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// TestDecisionCommandsFlags: approve, deny, resume and signal take where the run is and how to
// follow it, not the flags that choose a model.
func TestDecisionCommandsFlags(t *testing.T) {
	modelFlagNames := []string{"--model", "--base-url", "--api-key", "--timeout", "--record", "--price"}
	for _, name := range []string{"approve", "deny", "resume", "signal"} {
		code, out, _ := cli(t, name, "--help")
		if code != exitOK {
			t.Fatalf("reins %s --help: exit %d", name, code)
		}
		flags := out[strings.Index(out, "\nFlags:\n"):]
		for _, f := range modelFlagNames {
			if strings.Contains(flags, f+" ") {
				t.Errorf("reins %s --help shows %s", name, f)
			}
		}
		for _, f := range []string{"--data DIR", "--nats URL", "--server URL", "--follow", "--json", "--quiet"} {
			if !strings.Contains(flags, f) {
				t.Errorf("reins %s --help has no %s", name, f)
			}
		}
		if strings.Contains(flags, "--data-dir") {
			t.Errorf("reins %s --help shows --data-dir, the hidden old name of --data", name)
		}
	}
}
