package provider

import (
	"errors"
	"strings"

	"github.com/reins-run/reins/model"
)

// minSecretPiece is the shortest piece of a secret Scrub hides: a server that echoes a key
// masked ("sk-proj-abcd****wxyz") or cut still shows pieces of it.
const minSecretPiece = 8

// Redacted is what Scrub puts in place of a secret.
const Redacted = "[redacted]"

// Scrub returns s with secret, and every piece of it of 8 or more bytes, replaced by
// [redacted]. A secret shorter than 8 bytes is hidden only whole.
func Scrub(s, secret string) string {
	if secret == "" || s == "" {
		return s
	}
	if len(secret) < minSecretPiece {
		return strings.ReplaceAll(s, secret, Redacted)
	}
	// hide[i] marks the bytes of s inside some piece of the secret.
	hide := make([]bool, len(s))
	any := false
	for i := range len(s) {
		for j := range len(secret) {
			n := 0
			for i+n < len(s) && j+n < len(secret) && s[i+n] == secret[j+n] {
				n++
			}
			if n >= minSecretPiece {
				any = true
				for k := i; k < i+n; k++ {
					hide[k] = true
				}
			}
		}
	}
	if !any {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if !hide[i] {
			b.WriteByte(s[i])
			i++
			continue
		}
		b.WriteString(Redacted)
		for i < len(s) && hide[i] {
			i++
		}
	}
	return b.String()
}

// Redact returns err with secret scrubbed from everything it says: the message of a
// *model.Error, and its cause (the SDK's error, which quotes the server's reply) behind a
// wrapper that says the scrubbed text. errors.Is and errors.As still reach the cause.
func Redact(err error, secret string) error {
	if err == nil || secret == "" {
		return err
	}
	var me *model.Error
	if errors.As(err, &me) && me == err {
		c := *me
		c.Message = Scrub(me.Message, secret)
		if c.Err != nil {
			c.Err = &scrubbed{err: c.Err, text: Scrub(c.Err.Error(), secret)}
		}
		return &c
	}
	return &scrubbed{err: err, text: Scrub(err.Error(), secret)}
}

// scrubbed is an error whose text had a secret removed.
type scrubbed struct {
	err  error
	text string
}

func (s *scrubbed) Error() string { return s.text }
func (s *scrubbed) Unwrap() error { return s.err }
