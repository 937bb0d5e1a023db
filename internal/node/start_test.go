package node

import (
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/config"
)

// A port in use is a clear start-up error, with the stores closed again, so
// that the same data dir can be opened right after (found by the
// robustness harness: Start used to crash with a nil pointer instead).
func TestStartFailsCleanlyWhenAPortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	for _, tc := range []struct{ name, memcache, http, want string }{
		{"memcache", taken.Addr().String(), "127.0.0.1:0", "listen memcache"},
		{"http", "127.0.0.1:0", taken.Addr().String(), "listen http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Name, cfg.DataDir, cfg.MemcacheAddr, cfg.HTTPAddr = "n1", dir, tc.memcache, tc.http
			n, err := Start(cfg, logger)
			require.Nil(t, n)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "address already in use")
		})
	}
	// The stores were closed: the data dir opens again.
	cfg := config.Default()
	cfg.Name, cfg.DataDir, cfg.MemcacheAddr, cfg.HTTPAddr = "n1", dir, "127.0.0.1:0", "127.0.0.1:0"
	n, err := Start(cfg, logger)
	require.NoError(t, err)
	require.NoError(t, n.Shutdown(t.Context()))
}
