package provider

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"

	"github.com/reins-run/reins/model"
)

// Scrubber hides a set of secrets in what it is given: each secret of 8 or more bytes, and
// every piece of it of 8 or more bytes (a server that echoes a key masked or cut still shows
// pieces of it), and each shorter secret whole, each replaced by [Redacted]. A server's
// built-in workers scrub every value they store with the operator's credentials (model
// replies, tool results, errors), so that a provider or a tool that echoes a key in a
// successful reply stores nothing of it. The zero value and a nil *Scrubber hide nothing.
type Scrubber struct {
	long  []string // secrets of minSecretPiece bytes or more
	short []string // shorter secrets, hidden only whole
	// windows holds every minSecretPiece-byte window of the long secrets, as little-endian
	// words; pairs marks the first two bytes of each, a cheap test before the map's.
	windows map[uint64]struct{}
	pairs   [1 << 16 / 64]uint64
	maxLen  int
}

// NewScrubber returns a Scrubber of secrets (empty ones ignored), and of the form each takes
// inside a JSON string when that differs (a quote or a backslash escaped).
func NewScrubber(secrets ...string) *Scrubber {
	s := &Scrubber{windows: map[uint64]struct{}{}}
	add := func(secret string) {
		switch {
		case secret == "":
			return
		case len(secret) < minSecretPiece:
			s.short = append(s.short, secret)
		default:
			s.long = append(s.long, secret)
			for i := 0; i+minSecretPiece <= len(secret); i++ {
				s.windows[binary.LittleEndian.Uint64([]byte(secret[i:]))] = struct{}{}
				p := uint16(secret[i]) | uint16(secret[i+1])<<8
				s.pairs[p/64] |= 1 << (p % 64)
			}
		}
		s.maxLen = max(s.maxLen, len(secret))
	}
	for _, secret := range secrets {
		add(secret)
		if q, err := json.Marshal(secret); err == nil {
			if esc := string(q[1 : len(q)-1]); esc != secret {
				add(esc)
			}
		}
	}
	return s
}

// Empty reports whether s hides nothing.
func (s *Scrubber) Empty() bool { return s == nil || len(s.long)+len(s.short) == 0 }

// String returns text with the secrets hidden.
func (s *Scrubber) String(text string) string {
	hide := s.mask(text, nil)
	if hide == nil {
		return text
	}
	return redactMasked(text, hide)
}

// JSON returns raw, a JSON value, with the secrets hidden in it, still valid JSON: the bytes
// are scrubbed as text, and when that cut an escape sequence the value is decoded, its strings
// (member names too) scrubbed and encoded again.
func (s *Scrubber) JSON(raw json.RawMessage) json.RawMessage {
	if s.Empty() || len(raw) == 0 {
		return raw
	}
	out := s.String(string(raw))
	if out == string(raw) {
		return raw
	}
	if json.Valid([]byte(out)) {
		return json.RawMessage(out)
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return json.RawMessage(out) // not JSON to begin with: scrubbed as text
	}
	data, err := json.Marshal(s.value(v))
	if err != nil {
		return json.RawMessage(out)
	}
	return data
}

// value returns v, decoded JSON, with the secrets hidden in its strings and member names.
func (s *Scrubber) value(v any) any {
	switch v := v.(type) {
	case string:
		return s.String(v)
	case []any:
		for i := range v {
			v[i] = s.value(v[i])
		}
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[s.String(k)] = s.value(e)
		}
		return out
	}
	return v
}

// Error returns err with the secrets hidden in everything it says: the message of a
// *model.Error and its cause (the SDK's error, which quotes the server's reply) behind a
// wrapper that says the scrubbed text, or the text of any other error. errors.Is and errors.As
// still reach the cause. err itself when it says nothing secret.
func (s *Scrubber) Error(err error) error {
	if err == nil || s.Empty() {
		return err
	}
	var me *model.Error
	if errors.As(err, &me) && me == err {
		c := *me
		c.Message = s.String(me.Message)
		if c.Err != nil {
			if text := s.String(c.Err.Error()); text != c.Err.Error() {
				c.Err = &scrubbed{err: c.Err, text: text}
			}
		}
		if c.Message == me.Message && c.Err == me.Err {
			return err
		}
		return &c
	}
	if text := s.String(err.Error()); text != err.Error() {
		return &scrubbed{err: err, text: text}
	}
	return err
}

// Response returns r with the secrets hidden in its proposal: the answer, the reason, and each
// call's id and arguments (r itself when nothing was hidden; r is never changed).
func (s *Scrubber) Response(r *model.Response) *model.Response {
	if r == nil || s.Empty() {
		return r
	}
	p := r.Proposal
	text, reason := s.String(p.Text), s.String(p.Reason)
	var calls []model.ToolCall
	for i, c := range p.Calls {
		id, args := s.String(c.ID), s.JSON(c.Arguments)
		if id == c.ID && bytes.Equal(args, c.Arguments) {
			continue
		}
		if calls == nil {
			calls = append([]model.ToolCall(nil), p.Calls...)
		}
		calls[i].ID, calls[i].Arguments = id, args
	}
	if text == p.Text && reason == p.Reason && calls == nil {
		return r
	}
	c := *r
	c.Proposal.Text, c.Proposal.Reason = text, reason
	if calls != nil {
		c.Proposal.Calls = calls
	}
	return &c
}

// mask marks the bytes of text inside a secret, or inside a piece of 8 or more bytes of one,
// or-ed into carry (which may be nil or shorter than text); nil when nothing is marked.
func (s *Scrubber) mask(text string, carry []bool) []bool {
	var hide []bool
	mark := func(from, to int) {
		if hide == nil {
			hide = make([]bool, len(text))
		}
		for k := from; k < to; k++ {
			hide[k] = true
		}
	}
	for i, c := range carry {
		if c && i < len(text) {
			mark(i, i+1)
		}
	}
	if s.Empty() {
		return hide
	}
	for _, secret := range s.short {
		for off := 0; ; {
			i := strings.Index(text[off:], secret)
			if i < 0 {
				break
			}
			mark(off+i, off+i+len(secret))
			off += i + 1
		}
	}
	if len(s.long) == 0 {
		return hide
	}
	for i := 0; i+minSecretPiece <= len(text); i++ {
		p := uint16(text[i]) | uint16(text[i+1])<<8
		if s.pairs[p/64]&(1<<(p%64)) == 0 {
			continue
		}
		w := uint64(text[i]) | uint64(text[i+1])<<8 | uint64(text[i+2])<<16 | uint64(text[i+3])<<24 |
			uint64(text[i+4])<<32 | uint64(text[i+5])<<40 | uint64(text[i+6])<<48 | uint64(text[i+7])<<56
		if _, ok := s.windows[w]; ok {
			mark(i, i+minSecretPiece)
		}
	}
	return hide
}

// redactMasked replaces each run of marked bytes of text by [Redacted].
func redactMasked(text string, hide []bool) string {
	var b strings.Builder
	b.Grow(len(text))
	for i := 0; i < len(text); {
		if !hide[i] {
			b.WriteByte(text[i])
			i++
			continue
		}
		b.WriteString(Redacted)
		for i < len(text) && hide[i] {
			i++
		}
	}
	return b.String()
}

// Stream scrubs text that arrives in pieces (the deltas of a streaming reply) and hands what
// is safe to emit: it holds back the shortest tail that could still become (part of) a
// secret with what comes next, so that a secret split across pieces is hidden too.
type Stream struct {
	s     *Scrubber
	emit  func(string)
	held  string
	carry []bool // the bytes of held already known to be inside a secret
}

// Stream returns a Stream whose safe text goes to emit.
func (s *Scrubber) Stream(emit func(string)) *Stream { return &Stream{s: s, emit: emit} }

// Write takes the next piece of text.
func (st *Stream) Write(piece string) {
	if st.s.Empty() {
		if piece != "" {
			st.emit(piece)
		}
		return
	}
	buf := st.held + piece
	hide := st.s.mask(buf, st.carry)
	cut := st.s.risky(buf)
	if cut > 0 {
		if hide == nil {
			st.emit(buf[:cut])
		} else {
			st.emit(redactMasked(buf[:cut], hide[:cut]))
		}
	}
	st.held = buf[cut:]
	st.carry = nil
	if hide != nil {
		st.carry = append([]bool(nil), hide[cut:]...)
	}
}

// Flush emits what is held back: the text has ended.
func (st *Stream) Flush() {
	if st.held == "" {
		return
	}
	hide := st.s.mask(st.held, st.carry)
	if hide == nil {
		st.emit(st.held)
	} else {
		st.emit(redactMasked(st.held, hide))
	}
	st.held, st.carry = "", nil
}

// risky returns the first position of buf from which the rest of buf could begin a secret
// (a short one whole, a long one from any of its bytes), len(buf) when there is none.
func (s *Scrubber) risky(buf string) int {
	for i := max(0, len(buf)-s.maxLen+1); i < len(buf); i++ {
		tail := buf[i:]
		for _, secret := range s.short {
			if strings.HasPrefix(secret, tail) {
				return i
			}
		}
		for _, secret := range s.long {
			if couldContinue(secret, tail) {
				return i
			}
		}
	}
	return len(buf)
}

// couldContinue reports whether tail occurs in secret somewhere other bytes could follow:
// tail is a prefix of a suffix of secret that is longer than tail, or is itself a whole
// suffix of 8 or more bytes (already hidden; holding it changes nothing but is harmless).
func couldContinue(secret, tail string) bool {
	for j := 0; j+len(tail) <= len(secret); j++ {
		if secret[j:j+len(tail)] == tail && j+len(tail) < len(secret) {
			return true
		}
	}
	return false
}
