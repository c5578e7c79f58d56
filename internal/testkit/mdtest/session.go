package mdtest

import (
	"fmt"
	"regexp"
	"strings"
)

// Command is one command of a shell session in a README: a line that starts with the prompt
// "$ ", and the lines up to the next prompt, which are what the command prints.
type Command struct {
	Line int      // the prompt's line in the file
	Text string   // the command as written, without the prompt ("\" continuations joined)
	Want []string // the output the README shows, without the blank lines that end it
}

// Session returns the commands of b, or none when b has no line that starts with "$ ": a block
// of commands without prompts is shown, not run. Lines before the first prompt are ignored.
func Session(b Block) []Command {
	var cmds []Command
	lines := strings.Split(strings.TrimSuffix(b.Text, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if !strings.HasPrefix(line, "$ ") {
			if n := len(cmds); n > 0 {
				cmds[n-1].Want = append(cmds[n-1].Want, line)
			}
			continue
		}
		c := Command{Line: b.Line + 1 + i, Text: strings.TrimPrefix(line, "$ ")}
		for strings.HasSuffix(c.Text, `\`) && i+1 < len(lines) {
			i++
			c.Text = strings.TrimSuffix(c.Text, `\`) + strings.TrimSpace(lines[i])
		}
		cmds = append(cmds, c)
	}
	for i := range cmds {
		w := cmds[i].Want
		for len(w) > 0 && strings.TrimSpace(w[len(w)-1]) == "" {
			w = w[:len(w)-1]
		}
		cmds[i].Want = w
	}
	return cmds
}

// Elided is the line that stands, in a README's output, for any number of lines (none
// included): the ones left out because they are many or come in no fixed order.
const Elided = "..."

// runID is how a run id appears in a README's output and commands: "r-" and its letters and
// digits, or "r-…" for one the README never uses again.
var runID = regexp.MustCompile(`\br-[0-9a-z…]+`)

// Matcher compares the output of a README's commands with what the README shows. Its
// placeholders are few: a line "..." (Elided) stands for any lines, and a run id stands for
// the id the run really got. A README's run id is bound to the real one at its first match;
// after that it must be the same everywhere, and the README's later commands are run with the
// real id in its place. Lines are compared without their trailing spaces.
type Matcher struct {
	ids map[string]string // a README's run id → the real one
}

// Command returns text, a README's command, with the run ids bound so far in place of the
// README's.
func (m *Matcher) Command(text string) string {
	return runID.ReplaceAllStringFunc(text, func(id string) string {
		if real, ok := m.ids[id]; ok {
			return real
		}
		return id
	})
}

// Output checks got, what a command printed, against want, what the README shows, and binds
// the README's run ids. The error names the first line of want that the output does not have
// where the README shows it.
func (m *Matcher) Output(want []string, got string) error {
	lines := strings.Split(strings.TrimRight(got, "\n"), "\n")
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " \t")
	}
	if got == "" {
		lines = nil
	}
	s := search{want: want, got: lines, furthest: -1}
	ids, ok := s.match(0, 0, m.ids)
	if !ok {
		return s.mismatch()
	}
	m.ids = ids
	return nil
}

// search is one comparison of an output with a README's lines.
type search struct {
	want, got []string
	furthest  int // the furthest line of want that matched, for the error
}

// match reports whether want[wi:] matches got[gi:] with the run ids bound as ids says, and
// returns the bindings that made it match.
func (s *search) match(wi, gi int, ids map[string]string) (map[string]string, bool) {
	if wi == len(s.want) {
		return ids, gi == len(s.got)
	}
	if strings.TrimSpace(s.want[wi]) == Elided {
		for k := gi; k <= len(s.got); k++ {
			if b, ok := s.match(wi+1, k, ids); ok {
				return b, true
			}
		}
		return nil, false
	}
	if gi == len(s.got) {
		return nil, false
	}
	b, ok := line(strings.TrimRight(s.want[wi], " \t"), s.got[gi], ids)
	if !ok {
		return nil, false
	}
	s.furthest = max(s.furthest, wi)
	return s.match(wi+1, gi+1, b)
}

// mismatch says where the output stopped matching.
func (s *search) mismatch() error {
	var got strings.Builder
	for _, l := range s.got {
		got.WriteString("\t" + l + "\n")
	}
	next := s.furthest + 1
	for next < len(s.want) && strings.TrimSpace(s.want[next]) == Elided {
		next++
	}
	if next >= len(s.want) {
		return fmt.Errorf("the output goes on after the README's last line; it printed:\n%s", got.String())
	}
	return fmt.Errorf("the output has no line %q where the README shows it (line %d of its output); it printed:\n%s",
		s.want[next], next+1, got.String())
}

// line matches one line of a README against one line of output, binding its run ids: it
// returns the bindings with the line's own added.
func line(want, got string, ids map[string]string) (map[string]string, bool) {
	locs := runID.FindAllStringIndex(want, -1)
	if len(locs) == 0 {
		return ids, want == got
	}
	var pat strings.Builder
	pat.WriteString("^")
	last := 0
	for _, l := range locs {
		pat.WriteString(regexp.QuoteMeta(want[last:l[0]]))
		pat.WriteString(`(r-[0-9a-z]+)`)
		last = l[1]
	}
	pat.WriteString(regexp.QuoteMeta(want[last:]) + "$")
	sub := regexp.MustCompile(pat.String()).FindStringSubmatch(got)
	if sub == nil {
		return nil, false
	}
	bound := make(map[string]string, len(ids)+len(locs))
	for k, v := range ids {
		bound[k] = v
	}
	for i, l := range locs {
		id, real := want[l[0]:l[1]], sub[i+1]
		if strings.Contains(id, "…") {
			continue // a run the README never names again
		}
		if prev, ok := bound[id]; ok && prev != real {
			return nil, false
		}
		bound[id] = real
	}
	return bound, true
}
