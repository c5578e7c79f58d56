// Package buildtest gives the tests what they need from outside Go's test binary. It builds the
// programs that tests run as processes of their own (reins, the example MCP server, test
// workers): in the full suite (build tag e2e, [Heavy]) as the container image builds reins, with
// the environment and flags of the Dockerfile's go build (static, without cgo, paths trimmed),
// so that the module is compiled once without -race, whichever test builds first, and the reins
// the tests run is the image's; .ci/run builds them all before the tests ([BinEnv]). In the
// quick suite they are built with go build's own flags, reusing what go test compiled. And it finds, or installs as root, the system packages the heavy tests need
// ([Need]): outside CI a test that cannot have them skips saying how to run it, in CI it fails.
//
// It must not import any reins package, or be imported by anything but tests and its command
// prebuild.
package buildtest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Image returns the Dockerfile at the module's root, read once.
func Image() (*Dockerfile, error) {
	_, image, err := load()
	return image, err
}

var loaded struct {
	once  sync.Once
	root  string
	image *Dockerfile
	err   error
}

func load() (string, *Dockerfile, error) {
	loaded.once.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		mod := strings.TrimSpace(string(out))
		if err != nil || mod == "" || mod == os.DevNull {
			loaded.err = fmt.Errorf("buildtest: no module root (go env GOMOD: %q, %v)", mod, err)
			return
		}
		loaded.root = filepath.Dir(mod)
		loaded.image, loaded.err = ReadDockerfile(filepath.Join(loaded.root, "Dockerfile"))
	})
	return loaded.root, loaded.image, loaded.err
}

// Dockerfile is what the tests take from the Dockerfile: how its build stage builds reins, as
// whom and with what command its image runs it. No Docker engine runs here, so the image is
// checked by doing what it does: the binary built with its go build, run as its user with its
// command and nothing else in the environment.
type Dockerfile struct {
	BuildEnv   []string // the VAR=value words before "go build"
	BuildFlags []string // the flags of go build, without -o and the package
	User       string   // USER
	Entrypoint []string // ENTRYPOINT
	Cmd        []string // CMD
}

// DistrolessNonroot is the uid and gid of the user "nonroot" of the distroless base images.
const DistrolessNonroot = 65532

// ReadDockerfile reads the Dockerfile at path. Its go build must build ./cmd/reins.
func ReadDockerfile(path string) (*Dockerfile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d := &Dockerfile{}
	var built bool
	args := map[string]string{} // ARG NAME[=default]: a build gives none, so the defaults hold
	sc := bufio.NewScanner(f)
	var line strings.Builder
	n := 0
	for sc.Scan() {
		n++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(text, `\`); ok {
			line.WriteString(cont + " ")
			continue
		}
		line.WriteString(text)
		instr, rest, _ := strings.Cut(line.String(), " ")
		line.Reset()
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "ARG":
			name, def, _ := strings.Cut(rest, "=")
			args[name] = strings.Trim(def, `"`)
		case "RUN":
			words, err := shellWords(os.Expand(rest, func(k string) string { return args[k] }))
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, n, err)
			}
			if ok, err := d.goBuild(words); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, n, err)
			} else if ok {
				built = true
			}
		case "USER":
			d.User = rest
		case "ENTRYPOINT", "CMD":
			var args []string
			if err := json.Unmarshal([]byte(rest), &args); err != nil {
				return nil, fmt.Errorf("%s:%d: %s is not in the exec form (a JSON array): %w", path, n, instr, err)
			}
			if strings.EqualFold(instr, "CMD") {
				d.Cmd = args
			} else {
				d.Entrypoint = args
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !built {
		return nil, fmt.Errorf("%s: no RUN builds ./cmd/reins with go build", path)
	}
	return d, nil
}

// goBuild takes the environment and flags of words when they are a go build of ./cmd/reins.
func (d *Dockerfile) goBuild(words []string) (bool, error) {
	i := 0
	var env []string
	for ; i < len(words) && strings.Contains(words[i], "=") && !strings.HasPrefix(words[i], "-"); i++ {
		env = append(env, words[i])
	}
	if len(words) < i+2 || words[i] != "go" || words[i+1] != "build" {
		return false, nil
	}
	var flags []string
	pkg := ""
	for j := i + 2; j < len(words); j++ {
		switch w := words[j]; {
		case w == "-o":
			j++ // the image's path: the tests choose their own
		case strings.HasPrefix(w, "-"):
			flags = append(flags, w)
		default:
			pkg = w
		}
	}
	if pkg != "./cmd/reins" {
		return false, fmt.Errorf("go build builds %q, not ./cmd/reins", pkg)
	}
	d.BuildEnv, d.BuildFlags = env, flags
	return true, nil
}

// shellWords splits s into words as a POSIX shell does for the quoting a Dockerfile's build
// line uses: blanks, single and double quotes, backslashes in double quotes.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			} else {
				w.WriteByte(c)
			}
		case quote == '"':
			switch {
			case c == '"':
				quote = 0
			case c == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`+"`", s[i+1]) >= 0:
				i++
				w.WriteByte(s[i])
			default:
				w.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		case c == '&' || c == '|' || c == ';':
			return nil, fmt.Errorf("the build line %q chains commands: keep go build alone on its RUN", s)
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote in %q", quote, s)
	}
	if in {
		words = append(words, w.String())
	}
	return words, nil
}
