package provider

// minSecretPiece is the shortest piece of a secret Scrub hides: a server that echoes a key
// masked ("sk-proj-abcd****wxyz") or cut still shows pieces of it.
const minSecretPiece = 8

// Redacted is what Scrub puts in place of a secret.
const Redacted = "[redacted]"

// Scrub returns s with secret, and every piece of it of 8 or more bytes, replaced by
// [redacted]. A secret shorter than 8 bytes is hidden only whole. (A [Scrubber] does it for
// several secrets, made once.)
func Scrub(s, secret string) string { return NewScrubber(secret).String(s) }

// Redact returns err with secret scrubbed from everything it says: the message of a
// *model.Error, and its cause (the SDK's error, which quotes the server's reply) behind a
// wrapper that says the scrubbed text. errors.Is and errors.As still reach the cause.
func Redact(err error, secret string) error { return NewScrubber(secret).Error(err) }

// scrubbed is an error whose text had a secret removed.
type scrubbed struct {
	err  error
	text string
}

func (s *scrubbed) Error() string { return s.text }
func (s *scrubbed) Unwrap() error { return s.err }
