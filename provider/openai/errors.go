package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"

	"github.com/reins-run/reins/provider"
)

// maxErrorText bounds how much of a server's error text goes into an error message.
const maxErrorText = 500

// classify turns a failed call into the loop's terms. HTTP error statuses become
// provider.StatusError (retryable for 408, 409, 429 and 5xx, with the server's Retry-After);
// everything else goes through provider.TransportError: the caller's own cancellation is returned
// as is, this call's Timeout running out and dropped connections are retryable.
func (m *Model) classify(callerCtx, callCtx context.Context, err error, raw *http.Response) error {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		msg := apiErr.Message
		if msg == "" && apiErr.Response != nil {
			msg = bodyMessage(apiErr.Response)
		}
		return provider.StatusError(name, apiErr.StatusCode, header(apiErr.Response), msg, err)
	}
	if raw != nil && raw.StatusCode >= 400 {
		// An error status whose body is not OpenAI's {"error": {...}} shape.
		return provider.StatusError(name, raw.StatusCode, raw.Header, bodyMessage(raw), err)
	}
	if callerCtx.Err() == nil && errors.Is(callCtx.Err(), context.DeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
		// The call's own timeout cut a read short; the read error need not say so.
		err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return provider.TransportError(name, callerCtx, m.cfg.Timeout, err)
}

func header(r *http.Response) http.Header {
	if r == nil {
		return nil
	}
	return r.Header
}

// bodyMessage reads the error text of a reply body: the message of OpenAI's
// {"error": {"message": ...}}, of {"error": "..."} (Ollama, others) or {"message": ...}, else
// the body's text itself, shortened.
func bodyMessage(r *http.Response) string {
	if r == nil || r.Body == nil {
		return ""
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	var shaped struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &shaped) == nil {
		var nested struct {
			Message string `json:"message"`
		}
		var text string
		switch {
		case json.Unmarshal(shaped.Error, &nested) == nil && nested.Message != "":
			return shorten(nested.Message)
		case json.Unmarshal(shaped.Error, &text) == nil && text != "":
			return shorten(text)
		case shaped.Message != "":
			return shorten(shaped.Message)
		case json.Unmarshal(shaped.Detail, &text) == nil && text != "":
			return shorten(text)
		}
	}
	return shorten(string(body))
}

// shorten makes s fit on one line of a bounded length.
func shorten(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxErrorText {
		cut := maxErrorText
		for cut > 0 && s[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
