//go:build !linux

package timerslack

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Supported reports whether this platform has a timer slack to set.
const Supported = false

// Current returns an error: only Linux has a timer slack.
func Current() (time.Duration, error) {
	return 0, errors.New("timer slack: Linux only")
}

// Ensure does nothing: only Linux has a timer slack.
func Ensure(context.Context, time.Duration, *slog.Logger) {}
