package membership

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/httpapi"
)

// Advertised are the addresses this node publishes.
type Advertised struct{ Peer, HTTP, Memcache string }

// advertise picks the published address for a listener: the configured one,
// else the bound one with a wildcard host replaced by the host name.
func advertise(configured, bound string) string {
	if configured != "" {
		return configured
	}
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return bound
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h
		}
	}
	return net.JoinHostPort(host, port)
}

// Join asks the member at cfg.Join to add this node as a learner, through
// h's client, and saves the cluster it answered with as this node's
// membership. Basic credentials in cfg.Join's user information go with the
// request (net/http sends them) and never into an error: those name the
// member by config.RedactURL.
func Join(ctx context.Context, cfg config.Config, h HTTP, adv Advertised, path string) (*File, error) {
	body, err := json.Marshal(httpapi.MemberInfo{Name: cfg.Name, PeerAddr: adv.Peer, HTTPAddr: adv.HTTP, MemcacheAddr: adv.Memcache,
		Witness: cfg.Witness, MaxClusterVersion: command.ClusterVersionMax})
	if err != nil {
		return nil, err
	}
	url := strings.TrimRight(cfg.Join, "/") + "/v1/cluster/members"
	via := config.RedactURL(cfg.Join)
	var info httpapi.JoinInfo
	var lastErr error
	// The member may be starting too, or electing: retry for a while.
	deadline := time.Now().Add(max(cfg.RequestTimeout*3, 15*time.Second))
	for time.Now().Before(deadline) {
		info, lastErr = postJoin(ctx, h, url, body)
		if lastErr == nil {
			break
		}
		var perm *permanentError
		if errors.As(lastErr, &perm) {
			return nil, lastErr
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return nil, fmt.Errorf("join %s: %w", via, context.Cause(ctx))
		}
	}
	if lastErr != nil {
		return nil, fmt.Errorf("join %s: %w", via, lastErr)
	}
	m := &File{}
	if m.ClusterID, err = strconv.ParseUint(info.ClusterID, 16, 64); err != nil {
		return nil, fmt.Errorf("join %s: bad cluster id %q", via, info.ClusterID)
	}
	for _, x := range info.Members {
		id, err := strconv.ParseUint(x.ID, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("join %s: bad member id %q", via, x.ID)
		}
		m.Members = append(m.Members, FileMember{Name: x.Name, ID: id, PeerAddr: x.PeerAddr, Witness: x.Witness})
	}
	for _, v := range info.BootstrapVoters {
		id, err := strconv.ParseUint(v, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("join %s: bad voter id %q", via, v)
		}
		m.Bootstrap = append(m.Bootstrap, id)
	}
	if len(m.Bootstrap) == 0 {
		return nil, fmt.Errorf("join %s: the answer names no bootstrap voters", via)
	}
	m.AddedAt = info.AddedAt
	m.Self, m.ListenPeerAddr, m.Witness = cfg.Name, cfg.PeerAddr, cfg.Witness
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFileSync(path, b); err != nil {
		return nil, fmt.Errorf("save %s: %w", path, err)
	}
	return m, nil
}

// permanentError is a join refusal that retrying cannot fix.
type permanentError struct{ msg string }

func (e *permanentError) Error() string { return e.msg }

func postJoin(ctx context.Context, h HTTP, url string, body []byte) (httpapi.JoinInfo, error) {
	var info httpapi.JoinInfo
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		// Not err: url.Parse errors quote the URL, password and all.
		return info, &permanentError{"not a URL"}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client().Do(req)
	if err != nil {
		return info, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return info, err
	}
	if resp.StatusCode != http.StatusCreated {
		var e httpapi.Error
		_ = json.Unmarshal(b, &e)
		msg := fmt.Sprintf("%s: %s", resp.Status, e.Error)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			return info, &permanentError{msg}
		}
		return info, errors.New(msg)
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("decode answer: %w", err)
	}
	return info, nil
}

// Open returns this node's membership: the one saved in the data dir, or on
// a first start the one --initial-cluster describes, or, for a node with an
// empty data dir and --join, the one the member it joins through answers
// with (asked through h). fresh: the raft log is empty.
func Open(ctx context.Context, cfg config.Config, fresh bool, h HTTP, logger *slog.Logger) (*File, error) {
	path := filepath.Join(cfg.DataDir, FileName)
	if cfg.Join != "" && fresh && !exists(path) {
		adv := Advertised{
			Peer:     advertise(cfg.AdvertisePeerAddr, cfg.PeerAddr),
			HTTP:     advertise(cfg.AdvertiseHTTPAddr, cfg.HTTPAddr),
			Memcache: advertise(cfg.AdvertiseMemcacheAddr, cfg.MemcacheAddr),
		}
		logger.Info("joining cluster", "via", config.RedactURL(cfg.Join), "peer_addr", adv.Peer)
		if _, err := Join(ctx, cfg, h, adv, path); err != nil {
			return nil, err
		}
	}
	ms, err := Load(cfg, fresh)
	if err != nil {
		return nil, fmt.Errorf("cluster membership: %w", err)
	}
	if cfg.InitialCluster != "" && len(ms.Bootstrap) == 0 {
		// Only the first start reads --initial-cluster; a changed one is
		// ignored, which the operator who changed it should hear.
		given, err := fromFlags(cfg)
		if err == nil && ms.Restored != nil {
			given.ClusterID = restoredID(given.ClusterID, *ms.Restored)
		}
		if err == nil && given.ClusterID != ms.ClusterID {
			logger.Warn("initial-cluster differs from the one this data dir was founded with, and is ignored: membership changes go through kvd cluster add/remove",
				"initial_cluster", cfg.InitialCluster, "file", path)
		}
	}
	if cfg.Join != "" && len(ms.Bootstrap) == 0 {
		// A data dir that founded its own cluster stays in it: --join is
		// read only by an empty one (a joined member restarted with it is
		// the usual case, and quiet).
		logger.Warn("join is ignored: this data dir already holds a cluster it founded; to join another, start with an empty data dir",
			"join", config.RedactURL(cfg.Join), "file", path)
	}
	return ms, nil
}

// Advertise returns the addresses this node publishes, given where its
// HTTP and memcache listeners are bound.
func (m *File) Advertise(cfg config.Config, httpAddr, memcacheAddr string, logger *slog.Logger) Advertised {
	adv := Advertised{
		Peer:     advertise(cfg.AdvertisePeerAddr, cfg.PeerAddr),
		HTTP:     advertise(cfg.AdvertiseHTTPAddr, httpAddr),
		Memcache: advertise(cfg.AdvertiseMemcacheAddr, memcacheAddr),
	}
	if len(m.Members) > 0 && cfg.AdvertisePeerAddr == "" {
		// A founding member is reached where --initial-cluster says. A lone
		// node's entry is its --peer-addr, which may be a wildcard (the
		// container image's 0.0.0.0): a joining node dialled that and
		// reached itself, so the wildcard gives way to the host name.
		// Once --peer-addr has changed since the first start, the entry
		// names a port nobody listens on any more: the node published it
		// and its peers could no longer reach it.
		for _, x := range m.Members {
			if x.ID != uint64(IDOf(cfg.Name)) {
				continue
			}
			if m.ListenPeerAddr == "" || m.ListenPeerAddr == cfg.PeerAddr {
				adv.Peer = advertise("", x.PeerAddr)
			} else {
				logger.Warn("peer-addr changed since the first start: advertising it instead of this member's --initial-cluster entry (set --advertise-peer-addr to choose)",
					"first_peer_addr", m.ListenPeerAddr, "peer_addr", cfg.PeerAddr, "advertised", adv.Peer)
			}
		}
	}
	return adv
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
