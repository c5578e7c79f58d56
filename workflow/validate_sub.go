package workflow

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Sub-workflows: call steps, map steps and parallel branches may name workflow files. Each file
// is read, parsed and validated once per Validate call (a diamond of references costs one parse
// per file) and summarized: its first problem, a chain of files by which it reaches a file again
// (recursion), and its longest chain of nested files (depth). The definition being validated
// reports, at the key that references a file, E_WORKFLOW_FILE when the file (or a file under it)
// cannot be read or is invalid, E_RECURSION when a workflow reaches itself again, and E_DEPTH
// when files nest more than MaxCallDepth deep.

// valSubFile is the summary of one sub-workflow file.
type valSubFile struct {
	path      string   // the path it is read from
	readErr   error    // it could not be read
	first     *Problem // its first problem (its own, or an invalid file under it); nil if none
	count     int      // how many problems it has
	recursion []string // absolute paths: from this file to one it reaches again; nil if none
	deepest   []string // absolute paths: its longest chain of nested files, itself first
}

// valResolver reads, parses and summarizes sub-workflow files for one Validate call.
type valResolver struct {
	opts    Options
	parse   func(file string, data []byte) (*Definition, Problems)
	files   map[string]*valSubFile // absolute path → summary, once complete
	stack   []string               // absolute paths of the files being visited
	onStack map[string]int         // absolute path → index in stack
	topDir  string                 // absolute directory of the top definition, for display
	names   map[string]string      // absolute path → display name of files with no real path
}

func newValResolver(opts Options) *valResolver {
	r := &valResolver{
		opts:    opts,
		parse:   opts.Parse,
		files:   map[string]*valSubFile{},
		onStack: map[string]int{},
		names:   map[string]string{},
	}
	if r.parse == nil {
		r.parse = Parse
	}
	return r
}

func (r *valResolver) push(abs string) {
	r.onStack[abs] = len(r.stack)
	r.stack = append(r.stack, abs)
}

func (r *valResolver) pop() {
	abs := r.stack[len(r.stack)-1]
	r.stack = r.stack[:len(r.stack)-1]
	delete(r.onStack, abs)
}

// show names a file in messages: relative to the top definition's directory when it is under
// it, else by its absolute path.
func (r *valResolver) show(abs string) string {
	if n, ok := r.names[abs]; ok {
		return n
	}
	if r.topDir != "" {
		if rel, err := filepath.Rel(r.topDir, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return rel
		}
	}
	return abs
}

// chain renders absolute paths as "a.toml → b.toml → a.toml".
func (r *valResolver) chain(abss []string) string {
	names := make([]string, len(abss))
	for i, a := range abss {
		names[i] = r.show(a)
	}
	return strings.Join(names, " → ")
}

// valCutAtRepeat cuts a chain of files after the first file that appears a second time.
func valCutAtRepeat(chain []string) []string {
	seen := make(map[string]bool, len(chain))
	for i, c := range chain {
		if seen[c] {
			return chain[:i+1]
		}
		seen[c] = true
	}
	return chain
}

// valRef is a reference to a sub-workflow file.
type valRef struct {
	key, path string
}

// subRefs lists the sub-workflow files the definition references, in step order, but those
// that leave its directory (checkPaths reports them; they are not read).
func (v *validator) subRefs() []valRef {
	var refs []valRef
	for _, r := range v.allSubRefs() {
		if v.outside(r.path) == "" {
			refs = append(refs, r)
		}
	}
	return refs
}

// allSubRefs lists every sub-workflow file the definition references, in step order, then
// those of its workflow tools, by tool name.
func (v *validator) allSubRefs() []valRef {
	var refs []valRef
	for i := range v.d.Steps {
		s := &v.d.Steps[i]
		switch s.Type {
		case Call, Map:
			if s.Workflow != "" {
				refs = append(refs, valRef{valStepKey(i, "workflow"), s.Workflow})
			}
		case Parallel:
			for j, b := range s.Branches {
				if b.Workflow != "" {
					refs = append(refs, valRef{valStepKey(i, "branches["+strconv.Itoa(j)+"].workflow"), b.Workflow})
				}
			}
		}
	}
	return append(refs, v.toolRefs()...)
}

// checkSubWorkflows checks the sub-workflow files of the definition under validation (the top
// of the tree of files).
func (v *validator) checkSubWorkflows(r *valResolver) {
	if v.opts.OneFile {
		return // checkPaths refuses every reference: nothing is read
	}
	refs := v.subRefs()
	if len(refs) == 0 {
		return
	}
	base := v.opts.BaseDir
	if base == "" && v.file != "" {
		base = filepath.Dir(v.file)
	}
	if base == "" {
		base = "."
	}
	if abs, err := filepath.Abs(base); err == nil {
		r.topDir = abs
	}
	// The top definition is on the stack too, so that a file calling it back is recursion; a
	// definition built in Go has no file and is named by its workflow name.
	self := ""
	if v.file != "" {
		if abs, err := filepath.Abs(v.file); err == nil {
			self = abs
		}
	}
	if self == "" {
		self = "\x00definition"
		r.names[self] = strconv.Quote(v.d.Name)
		if v.d.Name == "" {
			r.names[self] = "this workflow"
		}
	}
	r.push(self)
	defer r.pop()
	v.followRefs(r, refs, base, self, nil)
}

// followRefs checks the references of the definition at absolute path self (the top one when
// sum is nil, else the sub-workflow file sum summarizes), whose relative references resolve
// against dir.
func (v *validator) followRefs(r *valResolver, refs []valRef, dir, self string, sum *valSubFile) {
	for _, ref := range refs {
		path := ref.path
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			v.add(EWorkflowFile, ref.key, "the workflow file %q cannot be resolved: %v", ref.path, err)
			continue
		}
		var (
			recursion []string
			child     *valSubFile
		)
		if i, ok := r.onStack[abs]; ok {
			// r.stack[i:] runs from the file referenced to self.
			recursion = append([]string{self}, r.stack[i:]...)
		} else {
			child = r.summarize(abs, path)
			if child.recursion != nil {
				recursion = valCutAtRepeat(append([]string{self}, child.recursion...))
			}
		}
		if recursion != nil {
			if sum == nil {
				v.add(ERecursion, ref.key, "workflow %s leads back to a workflow it is part of (%s): workflows must not call themselves, directly or through others", strconv.Quote(ref.path), r.chain(recursion))
			} else if sum.recursion == nil {
				sum.recursion = recursion
			}
		}
		if child == nil {
			continue
		}
		switch {
		case child.readErr != nil:
			msg := child.readErr.Error()
			var pe *os.PathError
			if errors.As(child.readErr, &pe) {
				msg = pe.Err.Error()
			}
			v.add(EWorkflowFile, ref.key, "the workflow file %q (%s) cannot be read: %s", ref.path, child.path, msg)
		case child.first != nil:
			more := ""
			if child.count > 1 {
				more = fmt.Sprintf(" (and %d more problems)", child.count-1)
			}
			v.add(EWorkflowFile, ref.key, "the workflow file %q is invalid: %s%s", ref.path, child.first.String(), more)
		}
		if recursion != nil {
			continue
		}
		if sum != nil {
			if 1+len(child.deepest) > len(sum.deepest) {
				sum.deepest = append([]string{self}, child.deepest...)
			}
		} else if len(child.deepest) > MaxCallDepth {
			v.add(EDepth, ref.key, "workflow %s nests sub-workflows %d deep (%s), more than the %d allowed", strconv.Quote(ref.path), len(child.deepest), r.chain(append([]string{self}, child.deepest...)), MaxCallDepth)
		}
	}
}

// summarize reads, parses and validates the file at abs (read from path), and summarizes it.
func (r *valResolver) summarize(abs, path string) *valSubFile {
	if f, ok := r.files[abs]; ok {
		return f
	}
	f := &valSubFile{path: path, deepest: []string{abs}}
	r.push(abs)
	defer func() {
		r.pop()
		r.files[abs] = f
	}()
	data, err := os.ReadFile(path)
	if err != nil {
		f.readErr = err
		return f
	}
	d, ps := r.parse(path, data)
	if len(ps) > 0 || d == nil {
		if len(ps) == 0 {
			ps = Problems{{Code: EParse, File: path, Message: "the file holds no workflow"}}
		}
		valSort(ps)
		f.first, f.count = &ps[0], len(ps)
		return f
	}
	v := newValidator(d, r.opts)
	if v.file == "" {
		v.file = path
	}
	v.root = r.topDir
	v.checkLocal()
	v.followRefs(r, v.subRefs(), filepath.Dir(path), abs, f)
	if len(v.ps) > 0 {
		v.sort()
		f.first, f.count = &v.ps[0], len(v.ps)
	}
	return f
}
