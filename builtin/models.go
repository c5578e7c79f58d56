package builtin

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/reins-run/reins/fixture"
	"github.com/reins-run/reins/metrics"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/provider/registry"
	"github.com/reins-run/reins/ratelimit"
	"github.com/reins-run/reins/telemetry"
	"github.com/reins-run/reins/workflow"
)

// modelKey names a kept model: the workflow's hash and the model's name in it ("" and
// Config.Model for the override).
type modelKey struct{ workflow, name string }

// model returns the model of the job's step (see modelNamed).
func (h *Handlers) model(j *job) (model.Model, error) { return h.modelNamed(j, j.step.Model) }

// modelNamed returns a model of the job's step by its name in the workflow (see openModel),
// with a chat span around each call when tracing is on.
func (h *Handlers) modelNamed(j *job, name string) (model.Model, error) {
	m, err := h.openModel(j, name)
	if err != nil || !telemetry.Enabled() {
		return m, err
	}
	provider, modelName := h.modelIdentity(j, name)
	return telemetry.WrapModel(m, provider, modelName), nil
}

// modelIdentity names the provider and the model that model name of the job's workflow
// resolves to, as spans show them: what the workflow or the --model flag says, never a key
// or an endpoint.
func (h *Handlers) modelIdentity(j *job, name string) (provider, modelName string) {
	if h.cfg.Model != "" {
		p, m, _ := strings.Cut(h.cfg.Model, ":")
		if p == "replay" {
			m = filepath.Base(m)
		}
		return p, m
	}
	if h.cfg.Models[name] != nil {
		return "go", name
	}
	def := j.bundle.Definition.Models[name]
	if def.Model == "" || def.Provider == "replay" {
		return def.Provider, name
	}
	return def.Provider, def.Model
}

// openModel returns a model of the job's step by its name in the workflow (the step's model,
// an agent's summarizer): Config.Model when set, else the Go model of that name
// (Config.Models), else the workflow's [models.NAME]. Models that hold no per-run state
// (scripted, real providers) are opened once and kept; replay models are opened anew, so that
// each task replays its cassette from the start.
func (h *Handlers) openModel(j *job, name string) (model.Model, error) {
	if h.cfg.Model != "" {
		provider, name, _ := strings.Cut(h.cfg.Model, ":")
		return h.kept(modelKey{name: h.cfg.Model}, isReplay(h.cfg.Model), provider, name, func() (model.Model, error) {
			if h.cfg.Operator != nil {
				p, m, _ := strings.Cut(h.cfg.Model, ":")
				return h.operatorModel(j, "--model", p, m)
			}
			m, err := registry.Open(h.cfg.Model, h.cfg.Registry)
			if err != nil {
				return nil, j.failf("model %s: %w", h.cfg.Model, err)
			}
			return m, nil
		})
	}
	if m := h.cfg.Models[name]; m != nil {
		if h.cfg.Metrics == nil {
			return scrubbed(m, h.scrub), nil
		}
		return h.kept(modelKey{goModel, name}, false, goModel, name, func() (model.Model, error) { return m, nil })
	}
	def, ok := j.bundle.Definition.Models[name]
	if !ok {
		return nil, j.failf("model %q is not declared in the workflow's models", name)
	}
	return h.kept(modelKey{j.task.Workflow, name}, def.Provider == "replay", def.Provider, cmp.Or(def.Model, name), func() (model.Model, error) {
		return h.open(j, name, def)
	})
}

// goModel is the provider of the Go models of Config.Models in the metrics, and the workflow
// of their key in Handlers.models (no workflow hash is "go").
const goModel = "go"

// kept returns the model under key, opening it with open the first time (counted in the
// metrics as model of provider); a model that must not be kept (fresh) is opened every time.
func (h *Handlers) kept(key modelKey, fresh bool, provider, name string, open func() (model.Model, error)) (model.Model, error) {
	if fresh {
		m, err := open()
		if err != nil {
			return nil, err
		}
		return h.wrapped(m, provider, name), nil
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
	m = h.wrapped(m, provider, name)
	h.mu.Lock()
	defer h.mu.Unlock()
	if prev := h.models[key]; prev != nil {
		return prev, nil // opened concurrently: keep one
	}
	h.models[key] = m
	return m, nil
}

// wrapped returns m as the handlers call it: counted in the metrics, sharing the operator's
// rate limits, and scrubbed of the operator's credentials.
func (h *Handlers) wrapped(m model.Model, provider, name string) model.Model {
	return scrubbed(h.limited(counted(m, h.cfg.Metrics.ForModel(provider, name)), provider, name), h.scrub)
}

// limited returns m sharing the operator's rate limits of model name of provider with every
// worker (Config.Limiter): the provider's scope when it has limits, then the model's, which a
// 429 pauses. Only the operator's providers have them: m itself otherwise. The limiter goes
// around the counted model, so that a call's duration in the metrics leaves out its wait, which
// reins_model_wait_seconds shows.
func (h *Handlers) limited(m model.Model, provider, name string) model.Model {
	if h.cfg.Limiter == nil || h.cfg.Operator == nil || provider == goModel {
		return m
	}
	prov, ok := h.cfg.Operator.Provider(provider)
	if !ok {
		return m
	}
	var scopes []ratelimit.Scope
	if !prov.Limits.Zero() {
		scopes = append(scopes, ratelimit.Scope{Key: ratelimit.ProviderKey(provider), Limits: rateLimits(prov.Limits)})
	}
	scopes = append(scopes, ratelimit.Scope{Key: ratelimit.ModelKey(provider, name), Limits: rateLimits(prov.ModelLimits[name])})
	var waited func(time.Duration)
	if mm := h.cfg.Metrics.ForModel(provider, name); mm != nil {
		waited = mm.Waited
	}
	return h.cfg.Limiter.Wrap(m, waited, scopes...)
}

func rateLimits(r operator.RateLimits) ratelimit.Limits {
	return ratelimit.Limits{RPM: r.RPM, TPM: r.TPM, MaxConcurrent: r.MaxConcurrent}
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
	if h.cfg.Operator != nil {
		return h.serverModel(j, name, def)
	}
	switch def.Provider {
	case "scripted":
		m, err = fixture.ScriptedModel("models."+name+".script", def.Script, h.clock)
	case "replay":
		m, err = registry.Open("replay:"+j.bundle.Resolve(def.Cassette), h.cfg.Registry)
	case "openai", "anthropic":
		var opts registry.Options
		if opts, err = h.providerOptions(def); err == nil {
			m, err = registry.Open(def.Provider+":"+def.Model, opts)
		}
	default:
		err = fmt.Errorf("unknown provider %q (known: openai, anthropic, scripted, replay; a Go program serves its own models with reins.Reins.Model)", def.Provider)
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

// serverModel opens a workflow model on a shared server: scripted, or through the operator's
// provider it names. What only the operator may set fails the task for good (the submission
// check refuses it first; this is the worker's own guard).
func (h *Handlers) serverModel(j *job, name string, def workflow.ModelDef) (model.Model, error) {
	key := "models." + name
	switch {
	case def.BaseURL != "":
		return nil, j.failf("%s %s.base_url: a submitted workflow may not choose the endpoint of a model", workflow.EOperatorOnly, key)
	case def.APIKeyEnv != "":
		return nil, j.failf("%s %s.api_key_env: a submitted workflow may not choose the credential of a model", workflow.EOperatorOnly, key)
	case def.Cassette != "" || def.Provider == "replay":
		return nil, j.failf("%s %s.cassette: a submitted workflow may not name a file for the server to read", workflow.EOperatorOnly, key)
	case def.Provider == "scripted":
		m, err := fixture.ScriptedModel(key+".script", def.Script, h.clock)
		if err != nil {
			return nil, j.failf("model %s: %w", name, err)
		}
		return m, nil
	}
	return h.operatorModel(j, "model "+name, def.Provider, def.Model)
}

// operatorModel opens model m of the operator's provider p: at the base URL the operator paired
// with its key, and nothing read from the environment.
func (h *Handlers) operatorModel(j *job, what, p, m string) (model.Model, error) {
	op := h.cfg.Operator
	prov, ok := op.Provider(p)
	if !ok {
		return nil, j.failf("%s: the server has no provider %q", what, p)
	}
	if len(prov.Models) > 0 && !slices.Contains(prov.Models, m) {
		return nil, j.failf("%s: provider %s does not allow model %q (it allows: %s)", what, p, m, strings.Join(prov.Models, ", "))
	}
	key, err := op.APIKey(p)
	if err != nil {
		return nil, j.failf("%s: %w", what, err)
	}
	opts := h.cfg.Registry
	opts.BaseURL, opts.APIKey, opts.NoEnv, opts.Record = prov.BaseURL, key, true, ""
	mdl, err := registry.Open(prov.Kind+":"+m, opts)
	if err != nil {
		return nil, j.failf("%s: %w", what, err)
	}
	return mdl, nil
}

// counted returns m counting its calls, tokens and cost in mm (m itself when mm is nil). A
// model with prices keeps them, so that the loop still holds a call within a cost budget.
func counted(m model.Model, mm *metrics.Model) model.Model {
	if mm == nil {
		return m
	}
	return model.WithPricing(&countedModel{Model: m, m: mm}, m)
}

type countedModel struct {
	model.Model
	m *metrics.Model
}

func (c *countedModel) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	start := time.Now()
	resp, err := c.Model.Generate(ctx, req)
	if err != nil || resp == nil {
		c.m.Failed(time.Since(start))
		return resp, err
	}
	c.m.Called(time.Since(start), resp.Usage.InputTokens, resp.Usage.OutputTokens, resp.CostUSD)
	return resp, nil
}
