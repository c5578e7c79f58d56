package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestServeLogsConsole: serve's first log line names the console's URL, which serves the
// console, and the file of the admin token to paste, which holds the token the server accepts;
// the token itself is nowhere in the log. With --listen "" there is no console to name.
func TestServeLogsConsole(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			data := t.TempDir()
			s := startServe(t, data, "--no-workers", "--log-format", format)
			log := s.stderr.String()
			first, _, _ := strings.Cut(log, "\n")
			url, file := logAttr(t, format, first, "console"), logAttr(t, format, first, "token_file")
			if addr := logAttr(t, format, serving(t, log), "http"); url != "http://"+addr+"/" {
				t.Errorf("the first line names the console at %q, want http://%s/ (where serve listens):\n%s", url, addr, first)
			}
			abs, err := filepath.Abs(filepath.Join(data, "admin.token"))
			if err != nil {
				t.Fatal(err)
			}
			if file != abs {
				t.Errorf("the first line names the token file %q, want %q:\n%s", file, abs, first)
			}
			if !strings.Contains(first, url) || !strings.Contains(first, "sign in") || !strings.Contains(first, abs) {
				t.Errorf("the first line's message does not say where to go and what to paste:\n%s", first)
			}
			if token, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(token)) != s.token {
				t.Errorf("the token file %s holds %q (%v), want the server's admin token", file, token, err)
			}
			if strings.Contains(log, s.token) {
				t.Errorf("the log holds the admin token itself:\n%s", log)
			}
			resp, err := http.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(body), "admin.token") {
				t.Errorf("GET %s: %d %s, want the console's page telling where the token is:\n%s", url, resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
		})
	}
	t.Run("no HTTP", func(t *testing.T) {
		s := startServe(t, t.TempDir(), "--no-workers", "--listen", "")
		if log := s.stderr.String(); strings.Contains(log, "console") {
			t.Errorf("serve --listen \"\" names a console:\n%s", log)
		}
	})
}

// serving is the line of log that says serve serves.
func serving(t *testing.T, log string) string {
	t.Helper()
	for line := range strings.Lines(log) {
		if strings.Contains(line, "reins serving") {
			return line
		}
	}
	t.Fatalf("no line says reins serving:\n%s", log)
	return ""
}

// logAttr is the value of attribute key of a log line in format text or json.
func logAttr(t *testing.T, format, line, key string) string {
	t.Helper()
	if format == "json" {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line that is not JSON: %v\n%s", err, line)
		}
		if v, ok := rec[key].(string); ok {
			return v
		}
	} else if m := regexp.MustCompile(`(?:^| )` + regexp.QuoteMeta(key) + `=("(?:[^"\\]|\\.)*"|\S+)`).FindStringSubmatch(line); m != nil {
		return strings.Trim(m[1], `"`)
	}
	t.Fatalf("the log line has no %s:\n%s", key, line)
	return ""
}

// TestConsoleURL: the console's URL is where serve listens, a wildcard host reached at the
// loopback address of its family.
func TestConsoleURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:7400": "http://127.0.0.1:7400/",
		"localhost:7400": "http://localhost:7400/",
		"0.0.0.0:7400":   "http://127.0.0.1:7400/",
		":7400":          "http://127.0.0.1:7400/",
		"[::]:7400":      "http://[::1]:7400/",
		"[::1]:7411":     "http://[::1]:7411/",
		"10.1.2.3:80":    "http://10.1.2.3:80/",
		"not an address": "",
	} {
		if got := consoleURL(addr); got != want {
			t.Errorf("consoleURL(%q) = %q, want %q", addr, got, want)
		}
	}
}

// TestServeHelpNamesConsole: serve --help says where the console is and where the token to
// paste is.
func TestServeHelpNamesConsole(t *testing.T) {
	code, out, _ := cli(t, "serve", "--help")
	for _, want := range []string{"http://127.0.0.1:7400/", "DATA/admin.token", ".reins/admin.token", "first log line"} {
		if code != 0 || !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Errorf("serve --help (exit %d) does not say %q:\n%s", code, want, out)
		}
	}
}
