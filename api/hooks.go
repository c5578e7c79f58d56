package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

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
// of the body with the operator's secret of the hook, not by a bearer token. It holds a slot of
// the unauthenticated requests (the guard took it), and reads the body only after the cheap
// checks passed, at most Config.MaxWebhookBytes, before the server's read deadline: 404 for a
// hook the operator did not open, 413 for a Content-Length over the limit, 401 for a signature
// header that cannot be one, 400 for a delivery id that cannot be one (nothing read for any of
// these); then 401 for a signature that is not the body's (nothing starts), 400 for a body that
// is not I-JSON, 422 for JSON that is not an object (or nests too deep), 404 when no
// registered workflow listens on the hook, else 202 with the runs.
func (s *Server) hook(w http.ResponseWriter, r *http.Request, _ operator.Principal) error {
	name := r.PathValue("name")
	secret, ok := s.cfg.Principals.WebhookSecret(name)
	if !ok {
		return problemf(http.StatusNotFound, "there is no webhook %q: the server's operator opens one with [webhooks.NAME] and its secret", name)
	}
	if r.ContentLength > s.cfg.MaxWebhookBytes {
		return tooLarge(r, s.cfg.MaxWebhookBytes, "max_webhook_bytes")
	}
	sig := r.Header.Get(trigger.SignatureHeader)
	if !wellFormedSignature(sig) {
		return badSignature(name)
	}
	delivery := r.Header.Get(trigger.DeliveryHeader)
	if len(delivery) > maxDeliveryID || strings.IndexFunc(delivery, func(c rune) bool { return c <= ' ' || c == 0x7f }) >= 0 {
		return problemf(http.StatusBadRequest, "the header %s must be at most %d printable characters without spaces", trigger.DeliveryHeader, maxDeliveryID)
	}
	body, err := readBody(w, r, s.cfg.MaxWebhookBytes, "max_webhook_bytes")
	if err != nil {
		return err
	}
	// The body is whole: the read deadline that bounded it must not cut the delivery's runs
	// (the connection's watch for the client going away would cancel the request).
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	if !trigger.Verify(secret, body, sig) {
		return badSignature(name)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return problemf(http.StatusBadRequest, "the body is empty: a delivery is a JSON object, the input of the runs it starts")
	}
	if err := checkJSON("the body of the delivery", body, 0); err != nil {
		return err
	}
	if t := bytes.TrimLeft(body, " \t\r\n"); !bytes.HasPrefix(t, []byte("{")) {
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

// badSignature is the 401 of a delivery to hook name whose signature is missing or wrong.
func badSignature(name string) *Problem {
	p := problemf(http.StatusUnauthorized, "the header %s is missing or is not the signature of the body with webhook %s's secret: want sha256= and the hex HMAC-SHA256 of the raw body", trigger.SignatureHeader, name)
	p.hook = true
	return p
}

// wellFormedSignature reports whether sig could be a signature at all, as trigger.Verify reads
// one: "sha256=" (optional) and 64 hex digits. A delivery whose header cannot be one is refused
// before its body is read.
func wellFormedSignature(sig string) bool {
	sig = strings.TrimPrefix(strings.TrimSpace(sig), "sha256=")
	_, err := hex.DecodeString(sig)
	return err == nil && len(sig) == 2*sha256.Size
}
