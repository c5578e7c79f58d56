package workflow

import (
	"github.com/reins-run/reins/template"
)

// checkConcurrency checks the workflow's concurrency key: a limit of at least 1, and a key whose
// templates are well formed and read only the run input, since the key is rendered when a run
// starts, before any step ran. Whether the input has the path is known only then: a run whose
// key cannot be rendered fails with E_CONCURRENCY_KEY before any step (a default, {{input.x ??
// "none"}}, gives such runs a key instead).
func (v *validator) checkConcurrency() {
	c := v.d.Concurrency
	if c == nil {
		return
	}
	switch {
	case c.Limit == 0 && v.d.Source != nil && !v.has("concurrency.limit"):
		v.add(EMissingKey, "concurrency", "the concurrency key has no limit: set limit, how many runs with the same key may be active at once (at least 1)")
	case c.Limit < 1:
		v.add(EBadBound, "concurrency.limit", "the concurrency limit is %d: it must be at least 1 (how many runs with the same key may be active at once)", c.Limit)
	}
	refs, err := template.Refs(c.Key)
	if err != nil {
		v.add(ETemplate, "concurrency.key", "the concurrency key has a malformed template: %v", err)
		return
	}
	for _, ref := range refs {
		root, err := template.Root(ref.Path)
		switch {
		case err != nil:
			v.add(ETemplate, "concurrency.key", "the concurrency key has the template {{%s}}, which is not a valid path: %v", ref.Path, err)
		case root != "input":
			v.add(ETemplate, "concurrency.key", "the concurrency key reads {{%s}}, but it is rendered when a run starts, before any step ran: it may read only the run input (input or input.x)", ref.Path)
		}
	}
}
