package durable

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/cockroachdb/pebble/v2"
)

// PebbleLogger routes a Pebble instance's log to slog; both stores (and the
// state store's one-time upgrade through Pebble v1, whose Logger has the
// same three methods) open Pebble with it. Pebble calls it from the
// goroutine that opens the store and from its own flush and compaction
// goroutines.
//
// Pebble's routine messages go at debug level (a store logs a handful on
// every open), its errors at error level. Fatalf, which Pebble calls only on
// corruption or a broken invariant it cannot continue past, logs the message
// with the calling stack and ends the process with status 70 (EX_SOFTWARE),
// as the raft library's fatal errors do (internal/replica).
type PebbleLogger struct{ l *slog.Logger }

var _ pebble.Logger = PebbleLogger{}

// NewPebbleLogger returns a PebbleLogger writing to l; callers add the
// attributes that say which store it is (component=pebble and the like).
func NewPebbleLogger(l *slog.Logger) PebbleLogger { return PebbleLogger{l} }

// Infof logs Pebble's routine messages at debug level.
func (p PebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...))
}

// Errorf logs an error Pebble reports and continues past.
func (p PebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
}

// Fatalf logs an error Pebble cannot continue past and ends the process.
func (p PebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "fatal", true, "stack", string(debug.Stack()))
	os.Exit(70)
}
