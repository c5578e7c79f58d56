package builtin

import (
	"fmt"
	"os"

	"github.com/reins-run/reins/eval"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider/registry"
	"github.com/reins-run/reins/workflow"
)

// modelKey names a kept model: the workflow's hash and the model's name in it ("" and
// Config.Model for the override).
type modelKey struct{ workflow, name string }

// model returns the model of the job's step: Config.Model when set, else the step's model of
// the workflow. Models that hold no per-run state (scripted, real providers) are opened once
// and kept; replay models are opened anew, so that each task replays its cassette from the
// start.
func (h *Handlers) model(j *job) (model.Model, error) {
	if h.cfg.Model != "" {
		return h.kept(modelKey{name: h.cfg.Model}, isReplay(h.cfg.Model), func() (model.Model, error) {
			m, err := registry.Open(h.cfg.Model, h.cfg.Registry)
			if err != nil {
				return nil, j.failf("model %s: %w", h.cfg.Model, err)
			}
			return m, nil
		})
	}
	name := j.step.Model
	def, ok := j.bundle.Definition.Models[name]
	if !ok {
		return nil, j.failf("model %q is not declared in the workflow's models", name)
	}
	return h.kept(modelKey{j.task.Workflow, name}, def.Provider == "replay", func() (model.Model, error) {
		return h.open(j, name, def)
	})
}

// kept returns the model under key, opening it with open the first time; a model that must
// not be kept (fresh) is opened every time.
func (h *Handlers) kept(key modelKey, fresh bool, open func() (model.Model, error)) (model.Model, error) {
	if fresh {
		return open()
	}
	h.mu.Lock()
	m := h.models[key]
	h.mu.Unlock()
	if m != nil {
		return m, nil
	}
	m, err := open()
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if prev := h.models[key]; prev != nil {
		return prev, nil // opened concurrently: keep one
	}
	h.models[key] = m
	return m, nil
}

func isReplay(name string) bool {
	p, _, err := registry.Split(name)
	return err == nil && p == "replay"
}

// open opens a workflow model by its provider.
func (h *Handlers) open(j *job, name string, def workflow.ModelDef) (model.Model, error) {
	var (
		m   model.Model
		err error
	)
	switch def.Provider {
	case "scripted":
		m, err = eval.ScriptedModel("models."+name+".script", def.Script, h.clock)
	case "replay":
		m, err = registry.Open("replay:"+j.bundle.Resolve(def.Cassette), h.cfg.Registry)
	case "openai", "anthropic":
		var opts registry.Options
		if opts, err = h.providerOptions(def); err == nil {
			m, err = registry.Open(def.Provider+":"+def.Model, opts)
		}
	default:
		err = fmt.Errorf("unknown provider %q (known: openai, anthropic, scripted, replay)", def.Provider)
	}
	if err != nil {
		return nil, j.failf("model %s: %w", name, err)
	}
	return m, nil
}

// providerOptions are Config.Registry with the workflow model's base URL and the API key from
// the environment variable its api_key_env names.
func (h *Handlers) providerOptions(def workflow.ModelDef) (registry.Options, error) {
	opts := h.cfg.Registry
	if def.BaseURL != "" {
		opts.BaseURL = def.BaseURL
	}
	if def.APIKeyEnv == "" {
		return opts, nil
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if key := getenv(def.APIKeyEnv); key != "" {
		opts.APIKey = key
	} else if opts.APIKey == "" && opts.BaseURL == "" {
		return opts, fmt.Errorf("the environment variable %s named by api_key_env is empty, and there is no base_url of a local server", def.APIKeyEnv)
	}
	return opts, nil
}
