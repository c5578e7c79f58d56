package workflow

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/reins-run/reins/internal/suggest"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/template"
)

// Options configures Validate.
type Options struct {
	// BaseDir is the directory sub-workflow files resolve against. Empty means the directory of
	// d.Source.File when the definition was loaded from a file, else the working directory.
	BaseDir string
	// Handlers lists the handler names workers register. Nil means handlers are not checked;
	// an empty, non-nil list means no handler is known.
	Handlers []string
	// Parse reads a sub-workflow file. Nil means the package's Parse.
	Parse func(file string, data []byte) (*Definition, Problems)
	// OneFile validates a definition that must stand alone, as a workflow registered with a
	// server is (one file, with no directory): no file is read or looked at, and every key
	// that names a sub-workflow file is E_PATH_OUTSIDE. Other paths (a cassette) are checked
	// lexically only.
	OneFile bool
}

// Validate checks d against the format (docs/reference/workflow-file.md) and returns every
// problem it finds in one pass, sorted by line then key. Each problem carries its stable code,
// the file and line from d.Source (when d was loaded from a file), the key it concerns, and one
// plain sentence. Validate does not change d.
//
// It checks names and ids, step types and their required keys, bounds and enumerated values,
// references to steps, models, tools and handlers, edges, the start step, cycles that do not pass
// through a loop edge, reachability from the start step, templates and dotted paths, and the
// sub-workflow files the definition calls (read, parsed and validated in turn, nested at most
// MaxCallDepth deep, never recursively). Its cost is linear in the size of the definition.
func Validate(d *Definition, opts Options) Problems {
	if d == nil {
		return Problems{{Code: EMissingKey, Message: "there is no workflow definition to validate"}}
	}
	v := newValidator(d, opts)
	v.checkLocal()
	v.checkSubWorkflows(newValResolver(opts))
	v.sort()
	return v.ps
}

// LoadAndValidate loads the workflow file at path and, when it could be read and decoded,
// validates it, with BaseDir defaulting to the file's directory. It returns the problems of both,
// sorted by line then key, and the definition, normalized (see [Definition.Normalize]) when there
// are no problems. A key the loader already reported (a value of the wrong type, an unknown step
// type, ...) is not reported again by the validator, nor are the keys under it.
func LoadAndValidate(path string, opts Options) (*Definition, Problems) {
	d, ps := Load(path)
	if d == nil {
		return nil, ps
	}
	if opts.BaseDir == "" {
		opts.BaseDir = filepath.Dir(path)
	}
	loaded := make(map[string]bool, len(ps))
	for _, p := range ps {
		if p.Key != "" {
			loaded[p.Key] = true
		}
	}
	all := append(Problems(nil), ps...)
	for _, p := range Validate(d, opts) {
		if !valUnder(p.Key, loaded) {
			all = append(all, p)
		}
	}
	if len(all) == 0 {
		d.Normalize()
		return d, nil
	}
	valSort(all)
	return d, all
}

// valUnder reports whether key, or a key enclosing it, is in keys.
func valUnder(key string, keys map[string]bool) bool {
	if len(keys) == 0 {
		return false
	}
	for k := key; k != ""; {
		if keys[k] {
			return true
		}
		i := lastSep(k)
		if i < 0 {
			return false
		}
		k = k[:i]
	}
	return false
}

// validator holds the state of one validation of one definition.
type validator struct {
	d        *Definition
	opts     Options
	file     string
	ps       Problems
	ids      map[string]int  // step id → index of its first declaration
	handlers map[string]bool // nil when handlers are not checked
	// root is the directory of the top workflow when this one is a sub-workflow file: its
	// paths may not leave that directory (they may leave their own file's).
	root string
	// cur is the index of the step checkStep checks; reads are what its templates and paths
	// read of other steps' outputs, for checkBound once the graph is known.
	cur   int
	reads []stepRead
}

func newValidator(d *Definition, opts Options) *validator {
	v := &validator{d: d, opts: opts, ids: make(map[string]int, len(d.Steps))}
	if d.Source != nil {
		v.file = d.Source.File
	}
	for i, s := range d.Steps {
		if s.ID == "" {
			continue
		}
		if _, dup := v.ids[s.ID]; !dup {
			v.ids[s.ID] = i
		}
	}
	if opts.Handlers != nil {
		v.handlers = make(map[string]bool, len(opts.Handlers))
		for _, h := range opts.Handlers {
			v.handlers[h] = true
		}
	}
	return v
}

// add records a problem at key.
func (v *validator) add(code Code, key, format string, args ...any) {
	v.ps = append(v.ps, Problem{
		Code:    code,
		File:    v.file,
		Line:    v.d.Source.Line(key),
		Key:     key,
		Message: fmt.Sprintf(format, args...),
	})
}

// sort orders the problems by line, then key.
func (v *validator) sort() { valSort(v.ps) }

// valSort orders problems by line, then key (numbers inside keys compare as numbers, so
// steps[2] comes before steps[10]); problems at the same place keep their order.
func valSort(ps Problems) {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		if c := cmp.Compare(a.Line, b.Line); c != 0 {
			return c
		}
		return valCompareKeys(a.Key, b.Key)
	})
}

// valCompareKeys compares two keys, runs of digits by their value.
func valCompareKeys(a, b string) int {
	for a != "" && b != "" {
		if valIsDigit(a[0]) && valIsDigit(b[0]) {
			i, j := valDigits(a), valDigits(b)
			na, nb := strings.TrimLeft(a[:i], "0"), strings.TrimLeft(b[:j], "0")
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[i:], b[j:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func valIsDigit(c byte) bool { return '0' <= c && c <= '9' }

func valDigits(s string) int {
	i := 0
	for i < len(s) && valIsDigit(s[i]) {
		i++
	}
	return i
}

// has reports whether the source records key as written in the file: it tells a key set to its
// zero value from an absent one.
func (v *validator) has(key string) bool {
	if v.d.Source == nil {
		return false
	}
	_, ok := v.d.Source.Lines[key]
	return ok
}

// valStepKey addresses a key of step i: valStepKey(2, "handler") = "steps[2].handler".
func valStepKey(i int, key string) string {
	k := "steps[" + strconv.Itoa(i) + "]"
	if key != "" {
		k += "." + key
	}
	return k
}

// stepName names step i in messages: its id, else its position.
func (v *validator) stepName(i int) string {
	if id := v.d.Steps[i].ID; id != "" {
		return strconv.Quote(id)
	}
	return "steps[" + strconv.Itoa(i) + "]"
}

// valNameOK reports whether s is a workflow name: [a-z0-9_-]+.
func valNameOK(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || valIsDigit(c) || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// valIDOK reports whether s is a step id: [A-Za-z0-9_-]+.
func valIDOK(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !valIDChar(s[i]) {
			return false
		}
	}
	return true
}

func valIDChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || valIsDigit(c) || c == '_' || c == '-'
}

// valRawSet reports whether a raw JSON value holds something (not absent, null or empty).
func valRawSet(raw []byte) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && !bytes.Equal(t, []byte("null")) && !bytes.Equal(t, []byte("[]")) && !bytes.Equal(t, []byte("{}"))
}

// valList renders names for a message, at most 10 of them.
func valList(names []string) string {
	const most = 10
	q := make([]string, 0, min(len(names), most))
	for _, n := range names[:min(len(names), most)] {
		q = append(q, strconv.Quote(n))
	}
	s := strings.Join(q, ", ")
	if len(names) > most {
		s += fmt.Sprintf(" and %d more", len(names)-most)
	}
	return s
}

// valOneOf renders a set of allowed values: "fixed, linear or exponential".
func valOneOf(vals ...string) string {
	q := make([]string, len(vals))
	for i, s := range vals {
		q[i] = strconv.Quote(s)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// checkLocal runs every check that needs nothing but the definition.
func (v *validator) checkLocal() {
	v.checkTop()
	v.checkConcurrency()
	v.checkInputSchema()
	v.checkModels()
	v.checkTools()
	v.checkMCP()
	v.checkPaths()
	for i := range v.d.Steps {
		v.checkStep(i)
	}
	v.checkBranchPaths()
	v.checkEdges()
	start := v.checkStart()
	v.checkGraph(start)
	v.checkToolAgents()
	v.checkTriggers()
}

func (v *validator) checkTop() {
	d := v.d
	switch {
	case d.Name == "":
		v.add(EMissingKey, "name", "the workflow has no name: set name, made of a-z, 0-9, _ and -")
	case !valNameOK(d.Name):
		v.add(EBadName, "name", "the workflow name %q must be made of a-z, 0-9, _ and - only", d.Name)
	}
	if d.MaxSteps < 0 {
		v.add(EBadBound, "max_steps", "max_steps is %d: it must be positive (0 means the default, %d)", d.MaxSteps, DefaultMaxSteps)
	}
	if d.Deadline < 0 {
		v.add(EBadDuration, "deadline", "the deadline %s is negative", d.Deadline)
	}
	if len(d.Steps) == 0 {
		v.add(EMissingKey, "steps", "the workflow has no steps: declare at least one [[steps]]")
	}
}

var valProviders = []string{"openai", "anthropic", "scripted", "replay"}

func (v *validator) checkModels() {
	for _, name := range slices.Sorted(maps.Keys(v.d.Models)) {
		m := v.d.Models[name]
		key := "models." + name
		switch {
		case m.Provider == "":
			v.add(EMissingKey, key+".provider", "model %q has no provider: set it to %s", name, valOneOf(valProviders...))
		case !slices.Contains(valProviders, m.Provider) && !valNameOK(m.Provider):
			// Any other name is a provider of a server's operator (docs/reference/server.md).
			v.add(EBadValue, key+".provider", "model %q has provider %q: it must be %s, or the name of a provider of the server's operator (a-z, 0-9, _ and -)", name, m.Provider, valOneOf(valProviders...))
		case m.Provider == "scripted" && !valRawSet(m.Script):
			v.add(EMissingKey, key+".script", "model %q uses the scripted provider but has no script: list its turns in script", name)
		case m.Provider == "replay" && m.Cassette == "":
			v.add(EMissingKey, key+".cassette", "model %q uses the replay provider but has no cassette: name the recorded exchange file", name)
		}
	}
}

func (v *validator) checkTools() {
	for _, name := range slices.Sorted(maps.Keys(v.d.Tools)) {
		t := v.d.Tools[name]
		key := "tools." + name
		switch {
		case t.Handler == "" && !valRawSet(t.Mock) && t.MCP == "" && !t.RunsChild():
			v.add(EMissingKey, key, "tool %q has neither a handler, a mock, an MCP server, an agent nor a workflow: set one of them", name)
		case t.RunsChild():
			v.checkChildTool(name, t)
		case t.Handler != "" && t.MCP != "":
			v.add(EBadValue, key+".mcp", "tool %q sets both handler and mcp: a tool is served by a worker handler or by an MCP server, not both", name)
		case t.MCP != "" && !valNameOK(t.MCP):
			v.add(EBadValue, key+".mcp", "tool %q names the MCP server %q: a name is made of a-z, 0-9, _ and -", name, t.MCP)
		}
		switch {
		case t.Timeout < 0:
			v.add(EBadDuration, key+".timeout", "tool %q has a negative timeout (%s): want how long one call may take, such as \"30s\"", name, t.Timeout)
		case t.Timeout > 0 && t.RunsChild():
			v.add(EBadValue, key+".timeout", "tool %q runs a sub-run, which a timeout does not bound: bound the sub-run's steps instead", name)
		}
		if t.Handler != "" && v.handlers != nil && !v.handlers[t.Handler] {
			v.add(EUnknownHandler, key+".handler", "tool %q uses handler %q, which no worker registers", name, t.Handler)
		}
	}
}

// checkMCP checks the MCP servers the workflow declares. A tool's mcp need not name one of
// them: on a server it names the operator's, checked when the workflow is submitted.
func (v *validator) checkMCP() {
	for _, name := range slices.Sorted(maps.Keys(v.d.MCP)) {
		m := v.d.MCP[name]
		key := "mcp." + name
		switch {
		case !valNameOK(name):
			v.add(EBadName, key, "the MCP server name %q must be made of a-z, 0-9, _ and - only", name)
		case len(m.Command) > 0 && m.URL != "":
			v.add(EBadValue, key, "MCP server %s sets both command and url: set one", name)
		case len(m.Command) == 0 && m.URL == "":
			v.add(EMissingKey, key, "MCP server %s has neither command (a program started over stdio) nor url (a streamable HTTP endpoint)", name)
		case len(m.Command) > 0 && strings.TrimSpace(m.Command[0]) == "":
			v.add(EBadValue, key+".command", "MCP server %s has an empty program: the command is the program, then its arguments", name)
		case m.URL != "" && !valHTTPURL(m.URL):
			v.add(EBadValue, key+".url", "MCP server %s has url %q: want an http or https URL with a host", name, m.URL)
		}
	}
}

// valHTTPURL reports whether s is an http(s) URL with a host.
func valHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// checkPaths reports every path that leaves the workflow's directory (E_PATH_OUTSIDE): a
// cassette, a sub-workflow file. Lexically, and through symbolic links for files that exist.
func (v *validator) checkPaths() {
	var paths []valRef
	for _, name := range slices.Sorted(maps.Keys(v.d.Models)) {
		if c := v.d.Models[name].Cassette; c != "" {
			paths = append(paths, valRef{"models." + name + ".cassette", c})
		}
	}
	if v.opts.OneFile {
		for _, r := range v.allSubRefs() {
			v.add(EPathOutside, r.key, "%q names another file, and a registered workflow is one file: put the steps in this file, or run them as an agent tool of it", r.path)
		}
	} else {
		paths = append(paths, v.allSubRefs()...)
	}
	for _, p := range paths {
		if why := v.outside(p.path); why != "" {
			v.add(EPathOutside, p.key, "%s", why)
		}
	}
}

// dir is the directory the definition's relative paths resolve against.
func (v *validator) dir() string {
	if v.root == "" && v.opts.BaseDir != "" {
		return v.opts.BaseDir
	}
	if v.file != "" {
		return filepath.Dir(v.file)
	}
	return v.opts.BaseDir
}

// outside says why path leaves the workflow's directory (the top workflow's, for a
// sub-workflow file), or "".
func (v *validator) outside(path string) string {
	if v.opts.OneFile {
		return PathOutside(path)
	}
	if v.root == "" {
		if why := PathOutside(path); why != "" {
			return why
		}
		if dir := v.dir(); dir != "" {
			return valLinkOutside(dir, dir, path)
		}
		return ""
	}
	if filepath.IsAbs(path) {
		return PathOutside(path)
	}
	abs, err := filepath.Abs(filepath.Join(v.dir(), path))
	if err != nil {
		return fmt.Sprintf("%q cannot be resolved", path)
	}
	if rel, err := filepath.Rel(v.root, abs); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Sprintf("%q leaves the directory of the workflow that calls this file: name a file in it or below it", path)
	}
	return valLinkOutside(v.root, v.dir(), path)
}

// valLinkOutside reports why path, relative to base and inside root lexically, leads outside
// root through a symbolic link, or "" when it does not (or does not exist: nothing is read).
func valLinkOutside(root, base, path string) string {
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return ""
	}
	dir, err := filepath.EvalSymlinks(absRoot)
	if err != nil {
		return ""
	}
	abs, err := filepath.Abs(filepath.Join(base, path))
	if err != nil {
		return ""
	}
	target, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return ""
	}
	if rel, err := filepath.Rel(dir, target); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Sprintf("%q leads out of the workflow's directory through a symbolic link: name a file in it or below it", path)
	}
	return ""
}

// checkApprovers checks who may decide a step: principal names or role:NAME, each once.
func (v *validator) checkApprovers(key, step string, approvers []string) {
	for j, a := range approvers {
		k := key + "[" + strconv.Itoa(j) + "]"
		switch {
		case !valNameOK(strings.TrimPrefix(a, "role:")):
			v.add(EBadValue, k, "step %s names approver %q: want a principal's name or role:NAME, made of a-z, 0-9, _ and -", step, a)
		case slices.Contains(approvers[:j], a):
			v.add(EBadValue, k, "step %s names approver %q twice", step, a)
		}
	}
}

// valStepFields tells, for each type-specific key, whether a step sets it.
var valStepFields = []struct {
	key string
	set func(*Step) bool
}{
	{"handler", func(s *Step) bool { return s.Handler != "" }},
	{"max_iterations", func(s *Step) bool { return s.MaxIterations != 0 }},
	{"max_duration", func(s *Step) bool { return s.MaxDuration != 0 }},
	{"loop_delay", func(s *Step) bool { return s.LoopDelay != 0 }},
	{"model", func(s *Step) bool { return s.Model != "" }},
	{"prompt", func(s *Step) bool { return s.Prompt != "" }},
	{"instructions", func(s *Step) bool { return s.Instructions != "" }},
	{"output_schema", func(s *Step) bool { return len(s.OutputSchema) > 0 }},
	{"output_repairs", func(s *Step) bool { return s.OutputRepairs != nil }},
	{"goal", func(s *Step) bool { return s.Goal != "" }},
	{"tools", func(s *Step) bool { return len(s.Tools) > 0 }},
	{"policy", func(s *Step) bool { return s.Policy != nil }},
	{"budget", func(s *Step) bool { return s.Budget != nil }},
	{"context", func(s *Step) bool { return s.Context != nil }},
	{"expr", func(s *Step) bool { return s.Expr != "" }},
	{"branches", func(s *Step) bool { return len(s.Branches) > 0 }},
	{"max_concurrent", func(s *Step) bool { return s.MaxConcurrent != 0 }},
	{"items", func(s *Step) bool { return s.Items != "" }},
	{"step", func(s *Step) bool { return s.Step != "" }},
	{"workflow", func(s *Step) bool { return s.Workflow != "" }},
	{"max_items", func(s *Step) bool { return s.MaxItems != 0 }},
	{"on_timeout", func(s *Step) bool { return s.OnTimeout != "" }},
	{"on_needs_human", func(s *Step) bool { return s.OnNeedsHuman != "" }},
	{"approval_timeout", func(s *Step) bool { return s.ApprovalTimeout != 0 }},
	{"event", func(s *Step) bool { return s.Event != "" }},
	{"duration", func(s *Step) bool { return s.Duration != 0 }},
	{"message", func(s *Step) bool { return s.Message != "" }},
	{"approvers", func(s *Step) bool { return len(s.Approvers) > 0 }},
	{"stream", func(s *Step) bool { return s.Stream }},
	{"session", func(s *Step) bool { return s.Session != "" }},
	{"session_ttl", func(s *Step) bool { return s.SessionTTL != 0 }},
}

// valKeysOf is KeysOf as sets.
var valKeysOf = func() map[StepType]map[string]bool {
	m := make(map[StepType]map[string]bool, len(KeysOf))
	for t, keys := range KeysOf {
		set := make(map[string]bool, len(keys))
		for _, k := range keys {
			set[k] = true
		}
		m[t] = set
	}
	return m
}()

var valBackoffs = []string{"fixed", "linear", "exponential"}

func (v *validator) checkStep(i int) {
	v.cur = i
	s := &v.d.Steps[i]
	key := func(k string) string { return valStepKey(i, k) }
	name := v.stepName(i)

	switch {
	case s.ID == "":
		v.add(EMissingKey, key("id"), "step %d has no id: set id, made of A-Z, a-z, 0-9, _ and -", i+1)
	case !valIDOK(s.ID):
		v.add(EBadName, key("id"), "step id %q must be made of A-Z, a-z, 0-9, _ and - only, so that templates can name it", s.ID)
	default:
		if first := v.ids[s.ID]; first != i {
			v.add(EDuplicateID, key("id"), "step id %q is already used by steps[%d]: step ids must be unique", s.ID, first)
		}
	}

	// Common keys.
	if s.Timeout < 0 {
		v.add(EBadDuration, key("timeout"), "step %s has a negative timeout (%s)", name, s.Timeout)
	}
	if r := s.Retry; r != nil {
		if r.MaxAttempts < 1 {
			v.add(EBadBound, key("retry.max_attempts"), "step %s has retry.max_attempts %d: it must be at least 1", name, r.MaxAttempts)
		}
		if r.Backoff != "" && !slices.Contains(valBackoffs, r.Backoff) {
			v.add(EBadValue, key("retry.backoff"), "step %s has retry.backoff %q: it must be %s", name, r.Backoff, valOneOf(valBackoffs...))
		}
		if r.InitialDelay < 0 {
			v.add(EBadDuration, key("retry.initial_delay"), "step %s has a negative retry.initial_delay (%s)", name, r.InitialDelay)
		}
		if r.MaxDelay < 0 {
			v.add(EBadDuration, key("retry.max_delay"), "step %s has a negative retry.max_delay (%s)", name, r.MaxDelay)
		}
	}
	if s.Input != "" {
		if inputIsTemplate(s.Input) {
			v.checkTemplates(key("input"), name, s.Input)
		} else if template.LooksLikePath(s.Input) {
			v.checkPath(key("input"), name, "input", s.Input, false)
		}
	}

	switch {
	case s.Type == "":
		v.add(EMissingKey, key("type"), "step %s has no type: set it to one of %s", name, valTypeList())
		return
	case valKeysOf[s.Type] == nil:
		v.add(EUnknownType, key("type"), "step %s has unknown type %q: it must be one of %s", name, s.Type, valTypeList())
		return
	}

	// Keys of other step types.
	own := valKeysOf[s.Type]
	for _, f := range valStepFields {
		if !own[f.key] && f.set(s) {
			v.add(EUnknownKey, key(f.key), "step %s sets %s, which %s steps do not take", name, f.key, s.Type)
		}
	}

	missing := func(k, what string) {
		v.add(EMissingKey, key(k), "%s step %s needs %s: set %s", s.Type, name, what, k)
	}
	switch s.Type {
	case Task:
		v.checkHandler(i, missing)
	case AgentLoop:
		v.checkHandler(i, missing)
		switch {
		case s.MaxIterations == 0 && !v.has(key("max_iterations")):
			missing("max_iterations", "a bound on its iterations")
		case s.MaxIterations <= 0:
			v.add(EBadBound, key("max_iterations"), "agent_loop step %s has max_iterations %d: it must be positive", name, s.MaxIterations)
		}
		if s.MaxDuration < 0 {
			v.add(EBadDuration, key("max_duration"), "step %s has a negative max_duration (%s)", name, s.MaxDuration)
		}
		if s.LoopDelay < 0 {
			v.add(EBadDuration, key("loop_delay"), "step %s has a negative loop_delay (%s)", name, s.LoopDelay)
		}
	case LLM:
		v.checkModelRef(i, missing)
		if s.Prompt == "" {
			missing("prompt", "a prompt")
		} else {
			v.checkTemplates(key("prompt"), name, s.Prompt)
		}
		v.checkTemplates(key("instructions"), name, s.Instructions)
		if s.OutputRepairs != nil && *s.OutputRepairs < 0 {
			v.add(EBadBound, key("output_repairs"), "llm step %s has output_repairs %d: it must not be negative", name, *s.OutputRepairs)
		}
	case Agent:
		v.checkAgent(i, missing)
	case Switch:
		if s.Expr == "" {
			missing("expr", "an expr (a dotted path whose value is the label)")
		} else {
			v.checkPathOrTemplate(key("expr"), name, "expr", s.Expr)
		}
	case Parallel:
		v.checkParallel(i, missing)
	case Map:
		v.checkMap(i, missing)
	case Call:
		if s.Workflow == "" {
			missing("workflow", "a workflow file to call")
		}
	case Approval:
		if s.Prompt == "" {
			missing("prompt", "a prompt for the human")
		} else {
			v.checkTemplates(key("prompt"), name, s.Prompt)
		}
		v.checkOnTimeout(i)
		v.checkApprovers(key("approvers"), name, s.Approvers)
	case WaitEvent:
		if s.Event == "" {
			missing("event", "the name of the event it waits for")
		}
	case Sleep:
		switch {
		case s.Duration == 0 && !v.has(key("duration")):
			missing("duration", "a duration")
		case s.Duration < 0:
			v.add(EBadDuration, key("duration"), "sleep step %s has a negative duration (%s)", name, s.Duration)
		}
	case Fail:
		if s.Message == "" {
			missing("message", "a message")
		} else {
			v.checkTemplates(key("message"), name, s.Message)
		}
	}
}

func valTypeList() string {
	names := make([]string, len(StepTypes))
	for i, t := range StepTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

func (v *validator) checkHandler(i int, missing func(k, what string)) {
	s := &v.d.Steps[i]
	switch {
	case s.Handler == "":
		missing("handler", "a handler")
	case strings.HasPrefix(s.Handler, ReservedHandlerPrefix):
		v.add(EBadName, valStepKey(i, "handler"), "step %s uses handler %q: names starting with %q are reserved for the built-in steps", v.stepName(i), s.Handler, ReservedHandlerPrefix)
	case strings.ContainsFunc(s.Handler, badHandlerRune) || slices.Contains(strings.Split(s.Handler, "."), ""):
		v.add(EBadName, valStepKey(i, "handler"), "step %s uses handler %q, which cannot name a task subject: it must not hold '*', '>', '/', '\\', whitespace, control characters or an empty part between dots", v.stepName(i), s.Handler)
	case v.handlers != nil && !v.handlers[s.Handler]:
		v.add(EUnknownHandler, valStepKey(i, "handler"), "step %s uses handler %q, which no worker registers", v.stepName(i), s.Handler)
	}
}

// ReservedHandlerPrefix starts the names of the built-in handlers (reins-llm, reins-agent):
// a task or agent_loop step may not use it.
const ReservedHandlerPrefix = "reins-"

// badHandlerRune reports a character a handler name cannot hold: handlers name NATS subjects
// (reins.task.HANDLER, dots separating tokens) and durable consumers.
func badHandlerRune(r rune) bool {
	return r == '*' || r == '>' || r == '/' || r == '\\' || unicode.IsSpace(r) || unicode.IsControl(r)
}

func (v *validator) checkModelRef(i int, missing func(k, what string)) {
	s := &v.d.Steps[i]
	if s.Model == "" {
		missing("model", "a model")
		return
	}
	if _, ok := v.d.Models[s.Model]; !ok {
		v.add(EUnknownModel, valStepKey(i, "model"), "step %s uses model %q, which is not declared in [models]%s", v.stepName(i), s.Model, v.nearModel(s.Model))
	}
}

func (v *validator) checkAgent(i int, missing func(k, what string)) {
	s := &v.d.Steps[i]
	name := v.stepName(i)
	v.checkModelRef(i, missing)
	if s.Goal == "" {
		missing("goal", "a goal")
	} else {
		v.checkTemplates(valStepKey(i, "goal"), name, s.Goal)
	}
	v.checkTemplates(valStepKey(i, "instructions"), name, s.Instructions)
	toolList := func(k string, tools []string) {
		for j, t := range tools {
			if _, ok := v.d.Tools[t]; !ok {
				v.add(EUnknownTool, valStepKey(i, k)+"["+strconv.Itoa(j)+"]", "step %s names tool %q in %s, which is not declared in [tools]%s", name, t, k, v.nearTool(t))
			}
		}
	}
	toolList("tools", s.Tools)
	if s.OnNeedsHuman != "" && !slices.Contains(valOnNeedsHuman, s.OnNeedsHuman) {
		v.add(EBadValue, valStepKey(i, "on_needs_human"), "agent step %s has on_needs_human %q: it must be %s", name, s.OnNeedsHuman, valOneOf(valOnNeedsHuman...))
	}
	if s.ApprovalTimeout < 0 {
		v.add(EBadDuration, valStepKey(i, "approval_timeout"), "step %s has a negative approval_timeout (%s)", name, s.ApprovalTimeout)
	}
	v.checkOnTimeout(i)
	if p := s.Policy; p != nil {
		// policy.forbid may name tools that are not declared: forbidding them is harmless.
		toolList("policy.allow", p.Allow)
		toolList("policy.require_approval", p.RequireApproval)
		toolList("policy.required_evidence", p.RequiredEvidence)
		v.checkApprovers(valStepKey(i, "policy.approvers"), name, p.Approvers)
	}
	if b := s.Budget; b != nil {
		for _, f := range []struct {
			key      string
			negative bool
			value    any
		}{
			{"max_iterations", b.MaxIterations < 0, b.MaxIterations},
			{"max_tool_calls", b.MaxToolCalls < 0, b.MaxToolCalls},
			{"max_duration", b.MaxDuration < 0, b.MaxDuration},
			{"max_tokens", b.MaxTokens < 0, b.MaxTokens},
			{"max_cost_usd", b.MaxCostUSD < 0, b.MaxCostUSD},
			{"max_tool_failures", b.MaxToolFailures < 0, b.MaxToolFailures},
			{"max_repeated_calls", b.MaxRepeatedCalls < 0, b.MaxRepeatedCalls},
			{"max_invalid_actions", b.MaxInvalidActions < 0, b.MaxInvalidActions},
		} {
			if f.negative {
				v.add(EBadBound, valStepKey(i, "budget."+f.key), "agent step %s has budget.%s %v: it must not be negative", name, f.key, f.value)
			}
		}
	}
	if s.Context != nil {
		v.checkContext(i)
	}
	v.checkSession(i)
}

// checkSession checks an agent step's session: a template that is not blank, and a session_ttl
// only with a session, positive and at most MaxSessionTTL (the bucket keeps nothing longer).
func (v *validator) checkSession(i int) {
	s := &v.d.Steps[i]
	name := v.stepName(i)
	switch {
	case s.Session != "" && strings.TrimSpace(s.Session) == "":
		v.add(EBadValue, valStepKey(i, "session"), "agent step %s has a blank session: give a template such as \"{{input.customer_id}}\"", name)
	case s.Session != "":
		v.checkTemplates(valStepKey(i, "session"), name, s.Session)
	}
	switch {
	case s.SessionTTL != 0 && s.Session == "":
		v.add(EMissingKey, valStepKey(i, "session"), "agent step %s has session_ttl but no session for it to keep", name)
	case s.SessionTTL < 0:
		v.add(EBadDuration, valStepKey(i, "session_ttl"), "agent step %s has a negative session_ttl (%s)", name, s.SessionTTL)
	case s.SessionTTL > MaxSessionTTL:
		v.add(EBadBound, valStepKey(i, "session_ttl"), "agent step %s has session_ttl %s: it must be at most %s, how long the sessions bucket keeps anything", name, s.SessionTTL, MaxSessionTTL)
	}
}

// checkContext checks an agent step's context policy: a positive max_tokens, a known strategy,
// a keep_last not negative, a summarizer declared in [models] exactly when the strategy is
// summarize, and literal instructions that leave room in max_tokens (templated ones are only
// known at run time, where the loop stops context_exhausted instead).
func (v *validator) checkContext(i int) {
	s := &v.d.Steps[i]
	c, name := s.Context, v.stepName(i)
	key := func(k string) string { return valStepKey(i, "context."+k) }
	switch {
	case c.MaxTokens == 0 && !v.has(key("max_tokens")):
		v.add(EMissingKey, key("max_tokens"), "agent step %s has a context policy without max_tokens: set the most input tokens one model call may carry", name)
	case c.MaxTokens <= 0:
		v.add(EBadBound, key("max_tokens"), "agent step %s has context.max_tokens %d: it must be positive", name, c.MaxTokens)
	case !inputIsTemplate(s.Instructions):
		if n := model.EstimateInputTokens(&model.Request{Instructions: s.Instructions}); n >= c.MaxTokens {
			v.add(EBadBound, key("max_tokens"), "agent step %s has context.max_tokens %d, but its instructions alone come to about %d input tokens", name, c.MaxTokens, n)
		}
	}
	if c.Strategy != "" && !slices.Contains(loop.ContextStrategies, c.Strategy) {
		v.add(EBadValue, key("strategy"), "agent step %s has context.strategy %q: it must be %s", name, c.Strategy, valOneOf(valStrategies()...))
	}
	if c.KeepLast < 0 {
		v.add(EBadBound, key("keep_last"), "agent step %s has context.keep_last %d: it must not be negative", name, c.KeepLast)
	}
	switch {
	case c.Strategy == loop.Summarize && c.Summarizer == "":
		v.add(EMissingKey, key("summarizer"), "agent step %s summarizes its context but names no summarizer: set summarizer to a model of [models]", name)
	case c.Strategy != loop.Summarize && c.Summarizer != "":
		v.add(EBadValue, key("summarizer"), "agent step %s names a summarizer, which only strategy \"summarize\" uses (its strategy is %s)", name, cmp.Or(c.Strategy, loop.DropOldest))
	case c.Summarizer != "":
		if _, ok := v.d.Models[c.Summarizer]; !ok {
			v.add(EUnknownModel, key("summarizer"), "agent step %s uses model %q as its summarizer, which is not declared in [models]%s", name, c.Summarizer, v.nearModel(c.Summarizer))
		}
	}
}

func valStrategies() []string {
	out := make([]string, len(loop.ContextStrategies))
	for i, s := range loop.ContextStrategies {
		out[i] = string(s)
	}
	return out
}

// valOnTimeouts and valOnNeedsHuman are the values of on_timeout (approval, agent) and
// on_needs_human (agent).
var (
	valOnTimeouts   = []string{"deny", "fail"}
	valOnNeedsHuman = []string{"complete", "pause"}
)

// checkOnTimeout checks the on_timeout of an approval or agent step.
func (v *validator) checkOnTimeout(i int) {
	s := &v.d.Steps[i]
	if s.OnTimeout != "" && !slices.Contains(valOnTimeouts, s.OnTimeout) {
		v.add(EBadValue, valStepKey(i, "on_timeout"), "%s step %s has on_timeout %q: it must be %s", s.Type, v.stepName(i), s.OnTimeout, valOneOf(valOnTimeouts...))
	}
}

func (v *validator) checkParallel(i int, missing func(k, what string)) {
	s := &v.d.Steps[i]
	name := v.stepName(i)
	if len(s.Branches) == 0 {
		missing("branches", "at least one branch")
	}
	for j, b := range s.Branches {
		bkey := valStepKey(i, "branches["+strconv.Itoa(j)+"]")
		switch {
		case b.Step == "" && b.Workflow == "":
			v.add(EMissingKey, bkey, "branch %d of parallel step %s names neither a step nor a workflow", j+1, name)
		case b.Step != "" && b.Workflow != "":
			v.add(EBadValue, bkey, "branch %d of parallel step %s names both step %q and workflow %q: name one", j+1, name, b.Step, b.Workflow)
		case b.Step != "":
			if _, ok := v.ids[b.Step]; !ok {
				v.add(EUnknownStep, bkey, "parallel step %s has branch %q, which is not a step of this workflow%s", name, b.Step, v.nearStep(b.Step))
			}
		}
	}
	if s.MaxConcurrent < 0 {
		v.add(EBadBound, valStepKey(i, "max_concurrent"), "parallel step %s has max_concurrent %d: it must not be negative", name, s.MaxConcurrent)
	}
}

func (v *validator) checkMap(i int, missing func(k, what string)) {
	s := &v.d.Steps[i]
	name := v.stepName(i)
	if s.Items == "" {
		missing("items", "items (a dotted path to the list it maps over)")
	} else {
		v.checkPathOrTemplate(valStepKey(i, "items"), name, "items", s.Items)
	}
	switch {
	case s.MaxItems == 0 && !v.has(valStepKey(i, "max_items")):
		missing("max_items", "a bound on the number of items")
	case s.MaxItems <= 0:
		v.add(EBadBound, valStepKey(i, "max_items"), "map step %s has max_items %d: it must be positive", name, s.MaxItems)
	}
	switch {
	case s.Step == "" && s.Workflow == "":
		v.add(EMissingKey, valStepKey(i, "step"), "map step %s needs a body: set step (a step id) or workflow (a file)", name)
	case s.Step != "" && s.Workflow != "":
		v.add(EBadValue, valStepKey(i, "workflow"), "map step %s sets both step and workflow: set exactly one", name)
	}
	if s.Step != "" {
		if _, ok := v.ids[s.Step]; !ok {
			v.add(EUnknownStep, valStepKey(i, "step"), "map step %s runs step %q, which is not a step of this workflow%s", name, s.Step, v.nearStep(s.Step))
		}
	}
	if s.MaxConcurrent < 0 {
		v.add(EBadBound, valStepKey(i, "max_concurrent"), "map step %s has max_concurrent %d: it must not be negative", name, s.MaxConcurrent)
	}
}

func (v *validator) checkEdges() {
	for k, e := range v.d.Edges {
		ekey := "edges[" + strconv.Itoa(k) + "]"
		end := func(field, id string) {
			switch {
			case id == "":
				v.add(EMissingKey, ekey+"."+field, "edge %d has no %s step: set %s", k+1, field, field)
			default:
				if _, ok := v.ids[id]; !ok {
					v.add(EDanglingEdge, ekey+"."+field, "edge %d goes %s %q, which is not a step of this workflow%s", k+1, field, id, v.nearStep(id))
				}
			}
		}
		end("from", e.From)
		end("to", e.To)
		if e.MaxIterations < 0 {
			v.add(EBadBound, ekey+".max_iterations", "the loop edge %s → %s has max_iterations %d: it must be positive", e.From, e.To, e.MaxIterations)
		}
	}
}

// checkStart checks the start step and returns the index of the step runs start with, or -1
// when there is none.
func (v *validator) checkStart() int {
	d := v.d
	if d.Start != "" {
		i, ok := v.ids[d.Start]
		if !ok {
			v.add(EUnknownStep, "start", "the start step %q is not a step of this workflow%s", d.Start, v.nearStep(d.Start))
			return -1
		}
		return i
	}
	if len(d.Steps) == 0 {
		return -1
	}
	roots := d.Roots()
	if len(roots) == 1 {
		if i, ok := v.ids[roots[0]]; ok {
			return i
		}
		return -1
	}
	if len(roots) == 0 {
		v.add(ENoStart, "start", "every step has an incoming edge, so there is no start step: set start")
	} else {
		v.add(ENoStart, "start", "%d steps have no incoming edge (%s): set start to the one runs begin with", len(roots), valList(roots))
	}
	return -1
}

// nearStep, nearModel and nearTool are the "did you mean" of a name that is not a step id, a
// declared model or a declared tool: ": did you mean NAME?" when one nearly spells it, else "".
func (v *validator) nearStep(id string) string {
	return didYouMean(id, slices.Collect(maps.Keys(v.ids)))
}

func (v *validator) nearModel(name string) string {
	return didYouMean(name, slices.Collect(maps.Keys(v.d.Models)))
}

func (v *validator) nearTool(name string) string {
	return didYouMean(name, slices.Collect(maps.Keys(v.d.Tools)))
}

func didYouMean(name string, known []string) string {
	slices.Sort(known) // the same suggestion every time when two are as near
	if s := suggest.Closest(name, known); s != "" && s != name {
		return ": did you mean " + s + "?"
	}
	return ""
}
