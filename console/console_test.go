package console

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// TestHandler: the page and its files are served with the policy that forbids scripts, styles
// and connections of other origins and any framing, and scripts as JavaScript modules.
func TestHandler(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	for path, ctype := range map[string]string{
		"/":                      "text/html",
		"/style.css":             "text/css",
		"/js/app.js":             "text/javascript",
		"/js/views/run.js":       "text/javascript",
		"/js/sse.js":             "text/javascript",
		"/js/graph.js":           "text/javascript",
		"/js/views/waits.js":     "text/javascript",
		"/js/views/runs.js":      "text/javascript",
		"/js/views/approvals.js": "text/javascript",
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) {
			t.Errorf("GET %s: %d %s, want 200 %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), ctype)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: Content-Security-Policy %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-") {
			t.Errorf("GET %s: Content-Security-Policy %q allows something unsafe", path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("GET %s: headers %v", path, resp.Header)
		}
		if len(body) == 0 {
			t.Errorf("GET %s: empty", path)
		}
	}
}

// TestAssetsAreSafe reads every file of the console for what would let the API's data be run
// as code or break the policy: HTML built from strings, inline scripts, styles or handlers,
// eval, a token in a URL or a cookie, anything loaded from another origin.
func TestAssetsAreSafe(t *testing.T) {
	forbidden := []struct {
		re   *regexp.Regexp
		why  string
		exts string
	}{
		{regexp.MustCompile(`\.(innerHTML|outerHTML)\b|insertAdjacentHTML|document\.write|createContextualFragment|DOMParser`), "builds HTML from strings: text from the API must go in as text", ".js"},
		{regexp.MustCompile(`\beval\(|new Function\(|setTimeout\(\s*['"` + "`" + `]`), "runs strings as code", ".js"},
		{regexp.MustCompile(`document\.cookie|localStorage`), "keeps the token beyond the tab (sessionStorage only)", ".js"},
		{regexp.MustCompile(`[?&](token|access_token)=`), "puts a token in a URL", ".js .html"},
		{regexp.MustCompile(`new EventSource\(`), "EventSource cannot send the Authorization header", ".js"},
		{regexp.MustCompile(`https?://`), "loads something from another origin", ".js .css .html"},
		{regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>\s*[^<\s]`), "inline script", ".html"},
		{regexp.MustCompile(`(?i)\sstyle=|<style`), "inline style", ".html"},
		{regexp.MustCompile(`(?i)\son[a-z]+=`), "inline event handler", ".html"},
		{regexp.MustCompile(`setAttribute\(\s*['"](style|on[a-z]+)['"]`), "inline style or handler", ".js"},
	}
	n := 0
	err := fs.WalkDir(assets, "assets", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		data, err := fs.ReadFile(assets, path)
		if err != nil {
			return err
		}
		ext := path[strings.LastIndexByte(path, '.'):]
		for i, line := range strings.Split(string(data), "\n") {
			for _, f := range forbidden {
				if !strings.Contains(" "+f.exts+" ", " "+ext+" ") {
					continue
				}
				if f.re.MatchString(line) && !strings.Contains(line, "http://www.w3.org/2000/svg") {
					t.Errorf("%s:%d: %s: %s", path, i+1, f.why, strings.TrimSpace(line))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 5 {
		t.Fatalf("the console has %d files", n)
	}
}

// TestSignInHelp: the page served at / tells a person which token to paste and where it is
// (the data directory's admin.token, .reins/admin.token by default, or a principal's of the
// operator's configuration), and the script fills in the console's own address and shows the
// text on the sign-in form.
func TestSignInHelp(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	get := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	page := get("/")
	start, end := strings.Index(page, `<template id="sign-in-help">`), strings.Index(page, `</template>`)
	if start < 0 || end < start {
		t.Fatalf("the page has no sign-in help:\n%s", page)
	}
	help := strings.Join(strings.Fields(page[start:end]), " ")
	for _, want := range []string{
		"<code>DATA/admin.token</code>",
		"<code>.reins/admin.token</code>",
		"<code>--data DIR</code>",
		"<code>cat .reins/admin.token</code>",
		"first line of <code>reins serve</code>'s log",
		"principal of the operator's configuration",
		`class="console-url"`,
	} {
		if !strings.Contains(help, want) {
			t.Errorf("the sign-in help does not say %q:\n%s", want, help)
		}
	}
	app := get("/js/app.js")
	for _, want := range []string{"getElementById('sign-in-help')", "querySelector('.console-url')", "location.origin + '/'", "signInHelp())"} {
		if !strings.Contains(app, want) {
			t.Errorf("js/app.js does not show the sign-in help with the console's address: it lacks %q", want)
		}
	}
}
