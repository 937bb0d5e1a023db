package node

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/membership"
)

// freeAddr returns a loopback address nobody listens on (at the time).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func loneConfig(name, dir, peer string) config.Config {
	cfg := config.Default()
	cfg.Name, cfg.DataDir = name, dir
	cfg.MemcacheAddr, cfg.HTTPAddr, cfg.PeerAddr = "127.0.0.1:0", "127.0.0.1:0", peer
	return cfg
}

// startReady starts a node and waits until it is ready.
func startReady(t *testing.T, cfg config.Config) *Node {
	t.Helper()
	n, err := Start(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return n.KV().Status().Ready }, 30*time.Second, 5*time.Millisecond)
	return n
}

// A member's raft ID is derived from its name: a data dir started again
// under another --name used to start as a stranger to its own cluster,
// never ready and saying nothing. It is refused, naming the owner, also
// for a cluster.json written before the file recorded it.
func TestRestartUnderAnotherNameIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		legacy bool // cluster.json without "self", as an older kvd wrote it
		want   string
	}{
		{"recorded owner", false, `belongs to member "n1", not to "n2"`},
		{"older cluster.json", true, `belongs to one of the founding members n1, not to "n2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			n := startReady(t, loneConfig("n1", dir, "127.0.0.1:0"))
			require.NoError(t, n.Shutdown(t.Context()))
			path := filepath.Join(dir, membership.FileName)
			if tc.legacy {
				b, err := os.ReadFile(path)
				require.NoError(t, err)
				var m map[string]any
				require.NoError(t, json.Unmarshal(b, &m))
				delete(m, "self")
				delete(m, "listen_peer_addr")
				b, err = json.Marshal(m)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(path, b, 0o640))
			}
			n, err := Start(loneConfig("n2", dir, "127.0.0.1:0"), slog.New(slog.NewTextHandler(io.Discard, nil)))
			if n != nil {
				_ = n.Shutdown(t.Context())
			}
			require.ErrorContains(t, err, tc.want)
			// Its own name still starts it.
			n = startReady(t, loneConfig("n1", dir, "127.0.0.1:0"))
			require.NoError(t, n.Shutdown(t.Context()))
		})
	}
}

// A founding member advertises its --initial-cluster entry. Started again
// with another --peer-addr, it used to go on publishing the entry, an
// address nobody listened on any more, so its peers could not reach it.
func TestRestartWithAnotherPeerAddrAdvertisesIt(t *testing.T) {
	dir := t.TempDir()
	first, second := freeAddr(t), freeAddr(t)
	n := startReady(t, loneConfig("n1", dir, first))
	require.Eventually(t, func() bool { m, _ := n.Member(IDOf("n1")); return m.PeerAddr == first }, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, n.Shutdown(t.Context()))

	n = startReady(t, loneConfig("n1", dir, second))
	defer func() { require.NoError(t, n.Shutdown(t.Context())) }()
	require.Eventually(t, func() bool { m, _ := n.Member(IDOf("n1")); return m.PeerAddr == second }, 30*time.Second, 5*time.Millisecond,
		"published: %+v", func() any { m, _ := n.Member(IDOf("n1")); return m }())
}

// A joining node retries its join for 15 seconds or more; a signal
// (ctx's end) during that wait stops the start at once.
func TestJoinStopsWhenTheContextEnds(t *testing.T) {
	cfg := loneConfig("n2", t.TempDir(), freeAddr(t))
	cfg.Join = "http://" + freeAddr(t) // nobody answers
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	n, err := StartContext(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.Nil(t, n)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "join "+cfg.Join)
	require.Less(t, time.Since(start), 5*time.Second)
}

// A joining node that crashed after the join was answered and before it
// saved cluster.json asks again; the leader answers as for a new member,
// the node starts, and a restart (without --join) starts it again under
// its own name only.
func TestJoinRetriedAfterACrashBeforeClusterJSON(t *testing.T) {
	n1 := startReady(t, loneConfig("n1", t.TempDir(), freeAddr(t)))
	defer func() { require.NoError(t, n1.Shutdown(t.Context())) }()

	dir := t.TempDir()
	cfg := loneConfig("n2", dir, freeAddr(t))
	cfg.Join = "http://" + n1.HTTPAddr()
	adv := membership.Advertised{Peer: cfg.PeerAddr, HTTP: "127.0.0.1:1", Memcache: "127.0.0.1:1"}
	require.NoError(t, os.MkdirAll(dir, 0o750))
	_, err := membership.Join(t.Context(), cfg, membership.HTTP{}, adv, filepath.Join(dir, membership.FileName))
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(dir, membership.FileName)), "the crash: the answer was never saved")

	n2, err := Start(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return n2.KV().Status().Ready }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, n2.Shutdown(t.Context()))

	cfg.Join = ""
	n2 = startReady(t, cfg)
	require.NoError(t, n2.Shutdown(t.Context()))
	cfg.Name = "n3"
	_, err = Start(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.ErrorContains(t, err, `belongs to member "n2"`)
}
