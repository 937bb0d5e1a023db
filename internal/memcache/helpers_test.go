package memcache_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/node"
)

// startNode runs a real single-member node on loopback ports and waits until
// it is ready (the test binary's -timeout bounds the wait). Each tweak
// changes the default configuration first.
func startNode(tb testing.TB, tweaks ...func(*config.Config)) *node.Node {
	tb.Helper()
	cfg := config.Default()
	cfg.Name = "n1"
	cfg.DataDir = tb.TempDir()
	cfg.MemcacheAddr, cfg.HTTPAddr, cfg.PeerAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	n, err := node.Start(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(tb, err)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(tb, n.Shutdown(ctx))
	})
	deadline := time.Now().Add(time.Minute)
	for !n.KV().Status().Ready {
		require.True(tb, time.Now().Before(deadline), "node not ready within a minute")
		time.Sleep(5 * time.Millisecond)
	}
	return n
}
