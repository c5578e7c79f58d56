package main

import (
	"log/slog"
	"net"
	"path/filepath"

	"github.com/reins-run/reins/operator"
)

// consoleURL is the address of the console that serve serves on addr (HOST:PORT, as it
// listens): a wildcard host is reached at the loopback address of its family.
func consoleURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// adminTokenFile is where the admin token of data directory data is, as an absolute path so
// that it is found from any terminal.
func adminTokenFile(data string) string {
	path := filepath.Join(data, operator.AdminTokenFile)
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// logConsole says, first in serve's log, where the console is (addr: where serve listens, ""
// for nowhere) and what to paste to sign in: the token in tokenFile, or with none (an external
// NATS server, where the data directory has no admin) a principal's of the operator's
// configuration. It names the file, never the token: a secret never reaches a log.
func logConsole(log *slog.Logger, addr, tokenFile string) {
	if addr == "" {
		return
	}
	url := consoleURL(addr)
	if tokenFile == "" {
		log.Info("reins console at "+url+": sign in with the token of a principal of the operator's configuration (--config)", "console", url)
		return
	}
	log.Info("reins console at "+url+": sign in with the admin token in "+tokenFile, "console", url, "token_file", tokenFile)
}
