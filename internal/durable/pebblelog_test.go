package durable_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/kvd-project/kvd/internal/durable"
)

// Pebble's routine messages stay out of an info-level log; its errors do not.
func TestPebbleLoggerLevels(t *testing.T) {
	var buf bytes.Buffer
	l := durable.NewPebbleLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	l.Infof("opened %d tables", 3)
	l.Errorf("background error: %s", "disk full")
	out := buf.String()
	if strings.Contains(out, "opened") {
		t.Errorf("an Infof reached an info-level log:\n%s", out)
	}
	if !strings.Contains(out, `level=ERROR msg="background error: disk full"`) {
		t.Errorf("an Errorf did not reach the log as an error:\n%s", out)
	}
}
