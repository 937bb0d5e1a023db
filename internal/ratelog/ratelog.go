// Package ratelog owns kvd's rate-limited log lines: the ones an outsider
// can provoke at will (failed TLS handshakes, failed logins, refused peers),
// which must be logged, and must not let a flood of them fill the disk or
// drown the other lines.
package ratelog

import (
	"log/slog"
	"sync"
	"time"
)

// Limiter logs at most one line per interval; the next line it logs
// carries how many were suppressed in between.
type Limiter struct {
	logger   *slog.Logger
	interval time.Duration
	now      func() time.Time

	mu         sync.Mutex
	last       time.Time
	suppressed uint64
}

// New limits logger to one line per interval.
func New(logger *slog.Logger, interval time.Duration) *Limiter {
	return &Limiter{logger: logger, interval: interval, now: time.Now}
}

// Warn logs msg at warn level unless a line was logged within the
// interval, in which case it is counted and dropped.
func (l *Limiter) Warn(msg string, args ...any) {
	l.mu.Lock()
	now := l.now()
	if !l.last.IsZero() && now.Sub(l.last) < l.interval {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	l.last = now
	n := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed_since_last", n)
	}
	l.logger.Warn(msg, args...)
}

// Write makes the limiter an io.Writer for log.Logger users (net/http's
// ErrorLog): each write is one line.
func (l *Limiter) Write(p []byte) (int, error) {
	msg := string(p)
	for len(msg) > 0 && msg[len(msg)-1] == '\n' {
		msg = msg[:len(msg)-1]
	}
	l.Warn(msg)
	return len(p), nil
}
