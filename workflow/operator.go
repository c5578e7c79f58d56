package workflow

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
)

// Codes of the shared server (docs/reference/server.md).
const (
	// EOperatorOnly: a submitted workflow sets a key that carries power on a server (base_url,
	// api_key_env, cassette, an MCP server of its own), which only the operator may set.
	EOperatorOnly Code = "E_OPERATOR_ONLY"
	// EPathOutside: a path that leaves the workflow's directory.
	EPathOutside Code = "E_PATH_OUTSIDE"
)

// OperatorOnly lists what d sets that only a server's operator may set (E_OPERATOR_ONLY), one
// problem per key, in key order: a model's base_url, api_key_env or cassette, and every
// [mcp.NAME] server (a command is a program to start, a url an endpoint to reach). reins run
// on a private embedded server honours them: there the person running the file is the
// operator. Paths that leave the workflow's directory are Validate's (E_PATH_OUTSIDE).
func OperatorOnly(d *Definition) Problems {
	var ps Problems
	add := func(key, format string, args ...any) {
		ps = append(ps, Problem{Code: EOperatorOnly, Key: key, Message: fmt.Sprintf(format, args...)})
	}
	for _, name := range slices.Sorted(maps.Keys(d.Models)) {
		m := d.Models[name]
		if m.BaseURL != "" {
			add("models."+name+".base_url", "a submitted workflow may not choose the endpoint a model is called at: name a provider of the server's operator configuration instead")
		}
		if m.APIKeyEnv != "" {
			add("models."+name+".api_key_env", "a submitted workflow may not choose the credential a model is called with: the operator pairs each provider with its key")
		}
		if m.Cassette != "" {
			add("models."+name+".cassette", "a submitted workflow may not name a file for the server to read")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(d.MCP)) {
		m := d.MCP[name]
		switch {
		case len(m.Command) > 0:
			add("mcp."+name+".command", "a submitted workflow may not start a program on the server: name an MCP server of the operator's configuration with mcp = %q", name)
		case m.URL != "":
			add("mcp."+name+".url", "a submitted workflow may not choose an MCP endpoint for the server to reach: name an MCP server of the operator's configuration with mcp = %q", name)
		default:
			add("mcp."+name, "a submitted workflow may not declare MCP servers: they are the operator's")
		}
	}
	if d.Source != nil {
		for i := range ps {
			ps[i].File, ps[i].Line = d.Source.File, d.Source.Line(ps[i].Key)
		}
	}
	return ps
}

// PathOutside reports why path, a path a workflow file names, leaves the directory of that
// file, or "" when it stays inside: an absolute path, or one whose clean form climbs out with
// "..". The check is lexical: it is what the file says, wherever it is read.
func PathOutside(path string) string {
	if path == "" {
		return ""
	}
	if filepath.IsAbs(path) || strings.HasPrefix(path, "/") || strings.HasPrefix(path, `\`) || filepath.VolumeName(path) != "" {
		return fmt.Sprintf("%q is an absolute path: name a file in the workflow's directory or below it", path)
	}
	clean := filepath.ToSlash(filepath.Clean(path))
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return fmt.Sprintf("%q leaves the workflow's directory: name a file in it or below it", path)
	}
	return ""
}
