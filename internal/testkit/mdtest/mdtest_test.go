package mdtest

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBlocks(t *testing.T) {
	src := "# Title\n\n```go\nx := 1\n```\n\n1. A step:\n\n   ```\n   $ reins run f\n     indented\n   ```\n\n~~~~sh extra\n```\n~~~~\n`inline` ```not a fence```\n"
	got, err := Blocks("x.md", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []Block{
		{File: "x.md", Line: 3, Lang: "go", Text: "x := 1\n"},
		{File: "x.md", Line: 9, Lang: "", Text: "$ reins run f\n  indented\n"},
		{File: "x.md", Line: 14, Lang: "sh", Text: "```\n"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d blocks %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("block %d is %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestBlocksUnclosed(t *testing.T) {
	_, err := Blocks("x.md", []byte("text\n\n```sh\nreins run\n"))
	if err == nil || err.Error() != "x.md:3: the code block opened with ``` is never closed" {
		t.Errorf("error %v, want the unclosed block named", err)
	}
}

func TestSession(t *testing.T) {
	b := Block{File: "x.md", Line: 10, Text: "shown, not run\n$ reins run a \\\n    --input '{}'\nout 1\n\nout 2\n\n$ reins approve r-1\n\n"}
	got := Session(b)
	if len(got) != 2 {
		t.Fatalf("%d commands %+v, want 2", len(got), got)
	}
	if c := got[0]; c.Line != 12 || c.Text != "reins run a --input '{}'" || strings.Join(c.Want, "|") != "out 1||out 2" {
		t.Errorf("first command %+v", c)
	}
	if c := got[1]; c.Line != 18 || c.Text != "reins approve r-1" || len(c.Want) != 0 {
		t.Errorf("second command %+v", c)
	}
	if cmds := Session(Block{Text: "reins run a\nreins runs list\n"}); len(cmds) != 0 {
		t.Errorf("a block without prompts has commands %+v", cmds)
	}
}

func TestMatcher(t *testing.T) {
	for _, c := range []struct {
		name string
		want []string
		got  string
		err  string // a part of the error; "" for a match
	}{
		{"same", []string{"a", "b"}, "a\nb\n", ""},
		{"trailing spaces", []string{"a  "}, "a \n", ""},
		{"elided middle", []string{"a", "...", "d"}, "a\nb\nc\nd\n", ""},
		{"elided nothing", []string{"a", "...", "b"}, "a\nb\n", ""},
		{"elided indented", []string{" ...", "b"}, "x\nb\n", ""},
		{"elided end", []string{"a", "..."}, "a\nb\n", ""},
		{"run id", []string{"run r-abc completed"}, "run r-x7kq2 completed\n", ""},
		{"anonymous run id", []string{"run r-… completed"}, "run r-x7kq2 completed\n", ""},
		{"same id twice", []string{"run r-a", "approve r-a"}, "run r-1\napprove r-1\n", ""},
		{"same id, two runs", []string{"run r-a", "approve r-a"}, "run r-1\napprove r-2\n", `no line "approve r-a"`},
		{"missing line", []string{"a", "b"}, "a\nc\n", `no line "b" where the README shows it (line 2`},
		{"more output", []string{"a"}, "a\nb\n", "goes on after the README's last line"},
		{"less output", []string{"a", "b"}, "a\n", `no line "b"`},
		{"no output", []string{}, "", ""},
		{"not a wildcard", []string{"a.c"}, "abc\n", `no line "a.c"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var m Matcher
			err := m.Output(c.want, c.got)
			switch {
			case c.err == "" && err != nil:
				t.Errorf("error %v, want a match", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Errorf("error %v, want one with %q", err, c.err)
			}
		})
	}
}

// TestMatcherCommand: a README's run id, once bound, is replaced by the real one in its later
// commands, and nowhere else.
func TestMatcherCommand(t *testing.T) {
	var m Matcher
	if err := m.Output([]string{"run r-2v7kq waiting"}, "run r-9zz waiting\n"); err != nil {
		t.Fatal(err)
	}
	got := m.Command("reins approve r-2v7kq call_2_0 && echo writer-critic r-other")
	if want := "reins approve r-9zz call_2_0 && echo writer-critic r-other"; got != want {
		t.Errorf("command %q, want %q", got, want)
	}
}

func TestSources(t *testing.T) {
	src := Sources{"a.go": "\n" + Normalize("package a\n\nfunc f() {\n\tx := 1 // one\n\n\ty := 2\n}\n")}
	for _, c := range []struct {
		sample string
		found  bool
	}{
		{"x := 1    // one\ny := 2\n", true},
		{"  x := 1 // one\n\n      y := 2", true},
		{"x := 1\ny := 2\n", false},
		{"y := 2\nx := 1 // one\n", false},
		{"\n\n", false},
	} {
		if got := len(src.Find(c.sample)) == 1; got != c.found {
			t.Errorf("Find(%q) found=%v, want %v", c.sample, got, c.found)
		}
	}
}

// FuzzBlocks: any bytes give blocks in order of their lines, each inside the file, and the
// sessions of each block have their commands in order, within the block.
func FuzzBlocks(f *testing.F) {
	f.Add([]byte("# x\n```go\nx := 1\n```\n"))
	f.Add([]byte("   ```\n   $ reins run a \\\n  b\n   out\n   ```\n"))
	f.Add([]byte("~~~~\n```\n~~~\n~~~~\n"))
	f.Add([]byte("```sh\nunclosed\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		blocks, err := Blocks("f.md", src)
		lines := strings.Count(string(src), "\n") + 1
		last := 0
		for _, b := range blocks {
			if b.Line <= last || b.Line > lines {
				t.Fatalf("block at line %d after one at %d, in a file of %d lines", b.Line, last, lines)
			}
			if utf8.ValidString(string(src)) && !utf8.ValidString(b.Text) {
				t.Fatalf("block at line %d is not UTF-8 though the file is", b.Line)
			}
			end := b.Line + strings.Count(b.Text, "\n")
			prev := b.Line
			for _, c := range Session(b) {
				if c.Line <= prev || c.Line > end {
					t.Fatalf("command at line %d, outside the block of lines %d-%d or before the one at %d", c.Line, b.Line, end, prev)
				}
				prev = c.Line
			}
			last = end
		}
		if err != nil && !strings.HasPrefix(err.Error(), "f.md:") {
			t.Fatalf("error %q does not name the file and line", err)
		}
	})
}

// TestEnv: the commands find the shims first, and no REINS_ variable of the test's own
// environment reaches them.
func TestEnv(t *testing.T) {
	t.Setenv("REINS_SERVER", "http://elsewhere:7400")
	env := Env("/shims")
	if !strings.HasPrefix(env[0], "PATH=/shims:") {
		t.Errorf("PATH is %q, want /shims first", env[0])
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "REINS_") {
			t.Errorf("the commands' environment has %s", kv)
		}
	}
}
