package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// commandLogger is the log of a command that runs the engine and workers for a person at a
// terminal (run, approve, runs fork): what they log at level or above, one line each, as the
// command's own messages read: "reins: warning: MSG key=value ...". reins serve logs with slog's
// text format instead, for operators' tools.
func commandLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(&lineHandler{w: w, mu: &sync.Mutex{}, level: level})
}

type lineHandler struct {
	w     io.Writer
	mu    *sync.Mutex // shared by the handlers WithAttrs makes: one line at a time
	level slog.Level
	attrs string // " key=value" of WithAttrs
	group string // "group." of WithGroup
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString("reins: ")
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		b.WriteString("warning: ")
	}
	b.WriteString(r.Message)
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(h.attr(a))
		return true
	})
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *lineHandler) attr(a slog.Attr) string {
	v := a.Value.Resolve().String()
	if strings.ContainsAny(v, " \t\n\"=") || v == "" {
		v = fmt.Sprintf("%q", v)
	}
	return " " + h.group + a.Key + "=" + v
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	for _, a := range as {
		c.attrs += h.attr(a)
	}
	return &c
}

func (h *lineHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.group += name + "."
	return &c
}
