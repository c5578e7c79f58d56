package natsserver

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// serverLog adapts the embedded server's logger to slog. The server's notices are routine (its
// start-up banner, listeners), so they go to debug; warnings and errors keep their level. Fatalf
// does not exit the process: it logs an error and remembers the first message, which Open reports
// (the server returns from Start after a fatal error, e.g. a port already in use).
type serverLog struct {
	log *slog.Logger

	mu    sync.Mutex
	fatal string
}

func (l *serverLog) logf(level slog.Level, format string, v ...any) {
	if !l.log.Enabled(context.Background(), level) {
		return
	}
	l.log.Log(context.Background(), level, fmt.Sprintf(format, v...))
}

func (l *serverLog) Noticef(format string, v ...any) { l.logf(slog.LevelDebug, format, v...) }
func (l *serverLog) Warnf(format string, v ...any)   { l.logf(slog.LevelWarn, format, v...) }
func (l *serverLog) Errorf(format string, v ...any)  { l.logf(slog.LevelError, format, v...) }
func (l *serverLog) Debugf(format string, v ...any)  { l.logf(slog.LevelDebug, format, v...) }
func (l *serverLog) Tracef(format string, v ...any)  { l.logf(slog.LevelDebug, format, v...) }

func (l *serverLog) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	if l.fatal == "" {
		l.fatal = msg
	}
	l.mu.Unlock()
	l.log.Error(msg)
}

func (l *serverLog) fatalMessage() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatal
}
