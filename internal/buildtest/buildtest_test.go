package buildtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
)

func TestShellWords(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{`CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/reins ./cmd/reins`, []string{"CGO_ENABLED=0", "go", "build", "-trimpath", "-ldflags=-s -w", "-o", "/out/reins", "./cmd/reins"}},
		{`a 'b c' "d \"e\"" f\g`, []string{"a", "b c", `d "e"`, `f\g`}},
		{`  spaced   out  `, []string{"spaced", "out"}},
		{`""`, []string{""}},
	} {
		got, err := shellWords(tc.in)
		if err != nil || strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
			t.Errorf("shellWords(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`go build "x`, `go mod download && go build ./cmd/reins`} {
		if _, err := shellWords(bad); err == nil {
			t.Errorf("shellWords(%q): no error", bad)
		}
	}
}

func TestReadDockerfile(t *testing.T) {
	image, err := Image()
	if err != nil {
		t.Fatal(err)
	}
	// The module's own Dockerfile: what the tests build with and run as.
	if !slices.Contains(image.BuildEnv, "CGO_ENABLED=0") || !slices.Contains(image.BuildFlags, "-trimpath") {
		t.Errorf("the image's build: env %q, flags %q; want a static build (CGO_ENABLED=0, -trimpath)", image.BuildEnv, image.BuildFlags)
	}
	if image.User == "" || strings.HasPrefix(image.User, "root") || strings.HasPrefix(image.User, "0") {
		t.Errorf("the image runs as %q: not a non-root user", image.User)
	}
	for _, tc := range []struct{ name, text, want string }{
		{"no build", "FROM x\nRUN go mod download\n", "no RUN builds ./cmd/reins"},
		{"another package", "RUN go build -o /x ./cmd/other\n", `builds "./cmd/other"`},
		{"chained", "RUN go mod download && \\\n  go build ./cmd/reins\n", "chains commands"},
		{"shell form", "RUN go build ./cmd/reins\nCMD serve --data x\n", "not in the exec form"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "Dockerfile")
			if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadDockerfile(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadDockerfile: %v; want an error saying %q", err, tc.want)
			}
		})
	}
}

func FuzzShellWords(f *testing.F) {
	for _, s := range []string{`CGO_ENABLED=0 go build -ldflags="-s -w" ./cmd/reins`, `'a' "b\"c"`, `x && y`, `"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words, err := shellWords(s)
		if err != nil {
			return
		}
		// Words without quotes, blanks or backslashes come out as they went in.
		other := func(r rune) bool { return unicode.IsSpace(r) && r != ' ' && r != '\t' }
		if !strings.ContainsAny(s, "'\"\\") && !strings.ContainsFunc(s, other) {
			if got, want := strings.Join(words, " "), strings.Join(strings.Fields(s), " "); got != want {
				t.Errorf("shellWords(%q) = %q", s, words)
			}
		}
	})
}
