package ratelimit

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/reins-run/reins/model"
)

// DefaultReplyTokens is what a call without a reply cap (Request.MaxOutputTokens 0) is charged
// for its reply until its real usage settles it.
const DefaultReplyTokens = 1024

// MaxPause bounds the pause one answer can impose on a scope: a Retry-After of a day does not
// stop a deployment for a day.
const MaxPause = 10 * time.Minute

// DefaultPause is the pause of a 429 that says no Retry-After.
const DefaultPause = time.Second

// Wrap returns m with every call going through scopes in order: waiting for capacity in each,
// then calling m, then settling what the call used. The last scope is the model's (ModelKey):
// a 429 or a Retry-After pauses it for every worker. A model with prices keeps them. waited,
// when set, is told how long each call waited (a metric).
func (l *Limiter) Wrap(m model.Model, waited func(time.Duration), scopes ...Scope) model.Model {
	if l == nil || len(scopes) == 0 {
		return m
	}
	return model.WithPricing(&limited{Model: m, l: l, scopes: scopes, waited: waited}, m)
}

type limited struct {
	model.Model
	l      *Limiter
	scopes []Scope
	waited func(time.Duration)
}

// Generate waits for capacity, calls the model, and settles.
func (lm *limited) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	tokens := model.EstimateInputTokens(req)
	if req.MaxOutputTokens > 0 {
		tokens += req.MaxOutputTokens
	} else {
		tokens += DefaultReplyTokens
	}
	grants := make([]*Grant, 0, len(lm.scopes))
	release := func(used int64) {
		for _, g := range grants {
			_ = g.Release(used) // a release that fails comes back with the lease
		}
	}
	var waited time.Duration
	for _, s := range lm.scopes {
		g, err := lm.l.Acquire(ctx, s, tokens)
		if err != nil {
			release(0)
			if lm.waited != nil {
				lm.waited(waited)
			}
			return nil, &model.Error{Message: "the call could not get capacity under the shared limits: " + err.Error(), Retryable: true, Err: err}
		}
		waited += g.Waited
		grants = append(grants, g)
	}
	if lm.waited != nil {
		lm.waited(waited)
	}
	resp, err := lm.Model.Generate(ctx, req)
	var used int64
	if resp != nil {
		used = resp.Usage.Total()
	}
	if d := pauseFor(err); d > 0 {
		_ = lm.l.Pause(lm.scopes[len(lm.scopes)-1].Key, lm.l.clk.Now().Add(d))
	}
	release(used)
	return resp, err
}

// pauseFor is how long a failed call's answer asks every caller of the model to wait: its
// Retry-After when retryable, DefaultPause for a 429 without one; 0 otherwise.
func pauseFor(err error) time.Duration {
	var me *model.Error
	if !errors.As(err, &me) || !me.Retryable {
		return 0
	}
	switch {
	case me.RetryAfter > 0:
		return min(me.RetryAfter, MaxPause)
	case me.Status == http.StatusTooManyRequests:
		return DefaultPause
	}
	return 0
}
