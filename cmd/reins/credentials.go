package main

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/reins-run/reins/provider/registry"
	"github.com/reins-run/reins/workflow"
)

// modelUse is one model a run may call: the workflow that declares it, its name there, and the
// first step that calls it.
type modelUse struct {
	workflow, name, step string
	def                  workflow.ModelDef
	resolve              func(string) string // a path of the workflow, as its worker reads it
}

// modelsCalled lists the models the llm and agent steps of bs call (summarizers included),
// the root workflow's first, each once.
func modelsCalled(bs *workflow.Bundles) []modelUse {
	keys := slices.SortedFunc(maps.Keys(bs.All), func(a, b string) int {
		switch bs.Root {
		case a:
			return -1
		case b:
			return 1
		}
		return cmp.Compare(a, b)
	})
	var uses []modelUse
	seen := map[[2]string]bool{}
	for _, k := range keys {
		b := bs.All[k]
		d := b.Definition
		add := func(name, step string) {
			m, ok := d.Models[name]
			if name == "" || !ok || seen[[2]string{k, name}] {
				return
			}
			seen[[2]string{k, name}] = true
			uses = append(uses, modelUse{workflow: d.Name, name: name, step: step, def: m, resolve: b.Resolve})
		}
		for _, s := range d.Steps {
			if s.Type != workflow.LLM && s.Type != workflow.Agent {
				continue
			}
			add(s.Model, s.ID)
			if s.Context != nil {
				add(s.Context.Summarizer, s.ID)
			}
		}
	}
	return uses
}

// checkCredentials refuses, before a run starts on this process's built-in workers, a model the
// run would fail to open once it gets there: a real provider's without an API key (from its
// api_key_env, --api-key or the provider's environment variable) and no base URL of a local
// server, or a replayed model whose cassette cannot be read. reg is the options of the model
// flags; getenv reads the environment. The error is one sentence naming the model, the step and
// what to set.
func checkCredentials(bs *workflow.Bundles, reg registry.Options, getenv func(string) string) error {
	for _, u := range modelsCalled(bs) {
		if err := u.check(reg, getenv); err != nil {
			return err
		}
	}
	return nil
}

// check says what model u lacks to be opened (see checkCredentials).
func (u modelUse) check(reg registry.Options, getenv func(string) string) error {
	switch u.def.Provider {
	case "replay":
		path := u.resolve(u.def.Cassette)
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("%s cannot be replayed: its cassette %s cannot be read", u.what(), path)
		}
		return nil
	case "openai", "anthropic":
	default:
		return nil
	}
	keyEnv, urlEnv := registry.KeyEnv(u.def.Provider)
	baseURL := cmp.Or(u.def.BaseURL, reg.BaseURL)
	if u.def.APIKeyEnv != "" {
		// The model's own variable, not the provider's: a key goes where its workflow says.
		if getenv(u.def.APIKeyEnv) != "" || reg.APIKey != "" || baseURL != "" {
			return nil
		}
		return fmt.Errorf("%s needs an API key: set %s (its api_key_env), or pass --api-key", u.what(), u.def.APIKeyEnv)
	}
	if reg.APIKey != "" || getenv(keyEnv) != "" || baseURL != "" || getenv(urlEnv) != "" {
		return nil
	}
	return fmt.Errorf("%s needs an API key: set %s, or pass --api-key (a local server given with --base-url needs none)", u.what(), keyEnv)
}

// what names the model and where it is called: "model investigator (openai:gpt-4o-mini) of
// step investigate", "model openai:gpt-4o-mini of step investigate" when its name says it all,
// and the workflow when it is a sub-workflow's.
func (u modelUse) what() string {
	full := u.def.Provider + ":" + u.def.Model
	s := "model " + u.name
	if u.name != full {
		s += " (" + full + ")"
	}
	return s + " of step " + u.step + " of workflow " + u.workflow
}
