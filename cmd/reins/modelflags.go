package main

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/reins-run/reins/internal/suggest"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider"
	"github.com/reins-run/reins/provider/registry"
	"github.com/reins-run/reins/workflow"
	"github.com/spf13/cobra"
)

// modelFlags are the flags that choose and configure a real model, shared by `reins agent` and
// `reins eval --model`.
type modelFlags struct {
	name    string
	baseURL string
	apiKey  string
	timeout time.Duration
	record  string
	prices  []string
}

func (f *modelFlags) add(cmd *cobra.Command, usage string) {
	fl := cmd.Flags()
	fl.StringVar(&f.name, "model", "", usage)
	fl.StringVar(&f.baseURL, "base-url", "", "any server speaking the provider's protocol (vLLM, Ollama, llama.cpp server); default $OPENAI_BASE_URL / $ANTHROPIC_BASE_URL or the provider's API")
	fl.StringVar(&f.apiKey, "api-key", "", "the provider's API key; default $OPENAI_API_KEY / $ANTHROPIC_API_KEY")
	fl.DurationVar(&f.timeout, "timeout", 2*time.Minute, "bound on one model call, streaming included")
	fl.StringVar(&f.record, "record", "", "record every model exchange into this cassette `FILE` (replay it with --model replay:FILE)")
	fl.StringArrayVar(&f.prices, "price", nil, "price of a model in USD per million tokens, `MODEL=INPUT,OUTPUT` (repeatable); overrides the built-in table")
}

// priceTable is the table of --price.
func (f *modelFlags) priceTable() (provider.Prices, error) {
	prices := provider.Prices{}
	for _, p := range f.prices {
		name, price, err := provider.ParsePrice(p)
		if err != nil {
			return nil, fmt.Errorf("--price: %w", err)
		}
		prices[name] = price
	}
	return prices, nil
}

// open opens the model the flags name.
func (f *modelFlags) open() (model.Model, error) {
	prices, err := f.priceTable()
	if err != nil {
		return nil, err
	}
	return registry.Open(f.name, registry.Options{
		BaseURL: f.baseURL, APIKey: f.apiKey, Timeout: f.timeout, Record: f.record, Prices: prices,
	})
}

// didYouMeanModel is the hint of --model NAME that the workflow does not declare: the
// provider's model it likely means ("gpt-4o-mini": openai:gpt-4o-mini), or the declared model
// it nearly spells; "" when nothing is near.
func didYouMeanModel(def *workflow.Definition, name string) string {
	if guess := registry.Guess(name); guess != "" {
		return ": did you mean " + guess + "?"
	}
	if near := suggest.Closest(name, slices.Sorted(maps.Keys(def.Models))); near != "" {
		return ": did you mean " + near + "?"
	}
	return ""
}
