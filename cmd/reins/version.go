package main

import (
	"cmp"
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// stampedVersion and stampedCommit, when a build sets them (go build -ldflags "-X
// main.stampedVersion=v0.3.0 -X main.stampedCommit=77dec2b"), stand for what the toolchain
// could not stamp: a build from a copy without .git, such as the container image's.
var stampedVersion, stampedCommit string

// versionLine says which build of reins this is, from what the Go toolchain stamped into the
// binary: the module's version ("(devel)" for a build from a clone), the VCS commit it was
// built from (with "+dirty" when the work tree had changes) and the Go version, e.g.
// "reins version v0.3.0 (commit 77dec2b, go1.26.8)", the form of cobra's own --version.
func versionLine(info *debug.BuildInfo, ok bool) string {
	if !ok || info == nil {
		return "reins version unknown (built without module information)"
	}
	version := info.Main.Version
	if version == "" || version == "(devel)" && stampedVersion != "" {
		version = cmp.Or(stampedVersion, "(devel)")
	}
	var commit string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if commit == "" {
		commit = stampedCommit
	}
	if len(commit) > 7 {
		commit = commit[:7]
	}
	switch {
	case commit == "":
		commit = "unknown commit"
	case dirty:
		commit = "commit " + commit + "+dirty"
	default:
		commit = "commit " + commit
	}
	return fmt.Sprintf("reins version %s (%s, %s)", version, commit, info.GoVersion)
}

// buildVersion is versionLine of the running binary.
func buildVersion() string { return versionLine(debug.ReadBuildInfo()) }

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of reins, the commit it was built from and its Go version",
		Long: `Prints the module version of this reins binary ("(devel)" when it was built from a clone
rather than installed at a tagged version), the commit it was built from ("+dirty" when the
work tree had uncommitted changes) and the Go version that built it. reins --version prints the
same line.`,
		Example: "  reins version\n  reins --version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), buildVersion())
			return nil
		},
	}
}
