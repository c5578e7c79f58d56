// Package openai is a placeholder being implemented: see provider/provider.go.
package openai

import (
	"context"
	"errors"

	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/provider"
)

// Model is a openai model client.
type Model struct{ cfg provider.Config }

// New returns a client for cfg.
func New(cfg provider.Config) (*Model, error) { return &Model{cfg: cfg.WithDefaults()}, nil }

// Generate is not implemented yet.
func (m *Model) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	return nil, errors.New("not implemented")
}
