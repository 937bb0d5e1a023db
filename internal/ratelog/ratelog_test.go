package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLimiterLogsOnePerIntervalAndCountsTheRest(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, nil)), time.Second)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	steps := []struct {
		advance time.Duration
		logged  bool
	}{
		{0, true},
		{100 * time.Millisecond, false},
		{100 * time.Millisecond, false},
		{900 * time.Millisecond, true},
		{10 * time.Millisecond, false},
		{2 * time.Second, true},
	}
	lines := 0
	for i, s := range steps {
		now = now.Add(s.advance)
		l.Warn("handshake failed", "i", i)
		got := strings.Count(buf.String(), "\n")
		if s.logged {
			lines++
		}
		require.Equal(t, lines, got, "step %d", i)
	}
	out := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.NotContains(t, out[0], "suppressed")
	require.Contains(t, out[1], "suppressed_since_last=2")
	require.Contains(t, out[2], "suppressed_since_last=1")
}

func TestLimiterAsWriterTrimsTheNewline(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, nil)), time.Second)
	n, err := l.Write([]byte("http: TLS handshake error from 1.2.3.4:5: EOF\n"))
	require.NoError(t, err)
	require.Equal(t, 46, n)
	require.Contains(t, buf.String(), `msg="http: TLS handshake error from 1.2.3.4:5: EOF"`)
}
