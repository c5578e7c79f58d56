package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/trigger"
)

// Hooks starts the runs of a webhook delivery: package trigger's Service, which knows the
// webhook triggers of the registered workflows. The route has checked the signature before.
type Hooks interface {
	Deliver(ctx context.Context, hook string, body json.RawMessage, delivery string) ([]trigger.Started, error)
}

// HookAnswer is the answer of POST /v1/hooks/{name}: the runs the delivery started (or had
// started, when it came before with the same delivery id).
type HookAnswer struct {
	Runs []trigger.Started `json:"runs"`
}

// maxDeliveryID bounds the delivery id header.
const maxDeliveryID = 200

// hook serves POST /v1/hooks/{name} (docs/api.md, "Webhooks"): authenticated by the signature
// of the body with the operator's secret of the hook, not by a bearer token. 404 for a hook
// the operator did not open, 413 for a body larger than max_input_bytes, 401 for a missing or
// wrong signature (nothing starts), 422 for a body that is not a JSON object, 404 when no
// registered workflow listens on the hook, else 202 with the runs.
func (s *Server) hook(w http.ResponseWriter, r *http.Request, _ operator.Principal) error {
	name := r.PathValue("name")
	secret, ok := s.cfg.Principals.WebhookSecret(name)
	if !ok {
		return problemf(http.StatusNotFound, "there is no webhook %q: the server's operator opens one with [webhooks.NAME] and its secret", name)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxInputBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return problemf(http.StatusRequestEntityTooLarge, "the body is larger than the server's max_input_bytes (%d bytes) allows a run's input to be", s.cfg.MaxInputBytes)
		}
		return problemf(http.StatusBadRequest, "the body could not be read: %v", err)
	}
	if !trigger.Verify(secret, body, r.Header.Get(trigger.SignatureHeader)) {
		p := problemf(http.StatusUnauthorized, "the header %s is missing or is not the signature of the body with webhook %s's secret: want sha256= and the hex HMAC-SHA256 of the raw body", trigger.SignatureHeader, name)
		p.hook = true
		return p
	}
	delivery := r.Header.Get(trigger.DeliveryHeader)
	if len(delivery) > maxDeliveryID || strings.IndexFunc(delivery, func(c rune) bool { return c <= ' ' || c == 0x7f }) >= 0 {
		return problemf(http.StatusBadRequest, "the header %s must be at most %d printable characters without spaces", trigger.DeliveryHeader, maxDeliveryID)
	}
	if err := wire.CheckJSON(body, int(s.cfg.MaxInputBytes)); err != nil {
		return problemf(http.StatusUnprocessableEntity, "the body %v: a delivery is a JSON object, the input of the runs it starts", err)
	}
	if t := strings.TrimLeft(string(body), " \t\r\n"); !strings.HasPrefix(t, "{") {
		return problemf(http.StatusUnprocessableEntity, "the body is JSON but not an object: a delivery is a JSON object, the input of the runs it starts")
	}
	if s.cfg.Hooks == nil {
		return problemf(http.StatusNotFound, "no registered workflow listens on webhook %s: this server starts no triggers", name)
	}
	runs, err := s.cfg.Hooks.Deliver(r.Context(), name, body, delivery)
	switch {
	case errors.Is(err, trigger.ErrNoHook):
		return problemf(http.StatusNotFound, "no registered workflow listens on webhook %s: register one with a trigger webhook = %q", name, name)
	case errors.Is(err, trigger.ErrTaken) && len(runs) == 0:
		return problemf(http.StatusConflict, "webhook %s: the run id of this delivery names a run its trigger did not start, so send it with another %s", name, trigger.DeliveryHeader)
	case err != nil && len(runs) == 0:
		return err
	case err != nil:
		s.cfg.Log.Error("api: a webhook delivery started some of its runs", "hook", name, "err", err)
	}
	writeJSON(w, http.StatusAccepted, HookAnswer{Runs: runs})
	return nil
}
