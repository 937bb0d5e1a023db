package membership

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/httpapi"
	"github.com/kvd-project/kvd/internal/replica"
)

// The cluster version (command.ClusterVersionMax) rises as etcd's does: the
// leader asks every member which versions its binary applies (GET
// /v1/version) and, once all of them apply a version above the cluster's,
// proposes it through the log. A member it cannot ask, or whose address is
// not known yet, holds the version where it is; one that answers 404 is a
// kvd from before cluster versions, which applies version 1 only.

// clusterVersionEvery spaces the leader's checks. A check costs nothing
// once the cluster is at this binary's version, and one HTTP request per
// member while it is not.
const clusterVersionEvery = 500 * time.Millisecond

// versionAskTimeout bounds asking one member.
const versionAskTimeout = 2 * time.Second

func (c *Controller) watchClusterVersion(ctx context.Context) {
	t := time.NewTicker(clusterVersionEvery)
	defer t.Stop()
	for {
		c.raiseClusterVersion(ctx)
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// raiseClusterVersion proposes the highest version every member applies,
// when this node leads and the cluster is below it.
func (c *Controller) raiseClusterVersion(ctx context.Context) {
	cur := c.state.ClusterVersion()
	if cur >= command.ClusterVersionMax {
		return // the check that runs every half second for good: one load
	}
	// The member table before the configuration: a member raft lists
	// whose row this read missed has no address yet and holds the version;
	// the other order could miss a member raft lists after the row read.
	table, tableAt := c.state.MembersAt()
	st := c.rep.Status()
	if st.Role != "leader" || !st.Ready {
		return
	}
	addrs, ok := versionAddrs(st, table, tableAt)
	if !ok {
		return // the configuration is not published yet: next check
	}
	target, why := clusterVersionTarget(cur, addrs, func(id replica.NodeID, addr string) (uint64, error) {
		return askMaxClusterVersion(ctx, c.cfg.HTTP, id, addr)
	})
	if target <= cur {
		if why != "" && why != c.versionHeld {
			c.logger.Info("cluster version stays", "cluster_version", cur, "this_binary_applies", command.ClusterVersionMax, "because", why)
		}
		c.versionHeld = why
		return
	}
	// The table's fingerprint goes with the raise: a member added,
	// replaced or re-addressed while we asked (or before the raise is
	// applied) was never asked, and apply refuses the raise then, on
	// every node alike.
	res, err := c.kv.Do(ctx, &command.Command{Op: command.OpClusterVersion, ClusterVersion: target, MemberTable: fsm.MemberTableSum(table)})
	if err != nil {
		c.logger.Warn("raise the cluster version", "to", target, "err", err)
		return
	}
	if res.Status != command.StatusOK {
		c.logger.Info("cluster version stays", "cluster_version", cur, "because", "the member table changed while the members were asked; asking again")
		c.versionHeld = ""
		return
	}
	c.versionHeld = ""
	c.logger.Info("raised the cluster version", "from", cur, "to", target)
}

// versionAddrs are the HTTP addresses, from the replicated member table,
// of every member raft lists but this one ("" when its row has none); false
// when st is older than the table (applied at tableAt). The table is
// published inside apply, raft's configuration only once the Ready is
// handled: a member added by a change the table already holds may be
// missing from st, and would never be asked, though the raise carries the
// fingerprint of a table that holds it.
func versionAddrs(st replica.Status, table []fsm.Member, tableAt uint64) (map[replica.NodeID]string, bool) {
	if st.Applied < tableAt {
		return nil, false
	}
	rows := make(map[uint64]string, len(table))
	for _, m := range table {
		rows[m.ID] = m.HTTPAddr
	}
	addrs := map[replica.NodeID]string{}
	for _, id := range slices.Concat(st.Voters, st.Learners) {
		if id != st.ID {
			addrs[id] = rows[uint64(id)]
		}
	}
	return addrs, true
}

// clusterVersionTarget is the version the cluster may move to: the lowest
// of what this binary and every other member (addrs: their HTTP addresses)
// apply, or cur, with the reason, when a member cannot say.
func clusterVersionTarget(cur uint64, addrs map[replica.NodeID]string, ask func(id replica.NodeID, addr string) (uint64, error)) (uint64, string) {
	target := command.ClusterVersionMax
	ids := make([]replica.NodeID, 0, len(addrs))
	for id := range addrs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		addr := addrs[id]
		if addr == "" {
			return cur, fmt.Sprintf("member %x has not published its HTTP address yet", uint64(id))
		}
		v, err := ask(id, addr)
		if err != nil {
			return cur, fmt.Sprintf("member %x (%s) did not say which versions it applies: %v", uint64(id), addr, err)
		}
		if v < target {
			target = v
		}
	}
	if target <= cur {
		return cur, fmt.Sprintf("a member applies versions up to %d only", target)
	}
	return target, ""
}

// askMaxClusterVersion asks the member id at addr (host:port of its HTTP
// API) which cluster versions its binary applies. The answer must come
// from that member: an address the table still holds may by now be
// another kvd's, whose versions say nothing of this member's.
func askMaxClusterVersion(ctx context.Context, h HTTP, id replica.NodeID, addr string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, versionAskTimeout)
	defer cancel()
	var v httpapi.VersionInfo
	status, err := getJSON(ctx, h, addr, "/v1/version", 64<<10, &v)
	if err != nil {
		return 0, err
	}
	switch status {
	case http.StatusOK:
	case http.StatusNotFound:
		return 1, nil // a kvd from before cluster versions
	default:
		return 0, fmt.Errorf("GET /v1/version: %d %s", status, http.StatusText(status))
	}
	if want := strconv.FormatUint(uint64(id), 16); v.ID != want {
		return 0, fmt.Errorf("GET /v1/version: answered by member %q, not %s", v.ID, want)
	}
	if v.MaxClusterVersion < 1 {
		return 0, fmt.Errorf("GET /v1/version: max_cluster_version %d", v.MaxClusterVersion)
	}
	return v.MaxClusterVersion, nil
}

// getJSON GETs path from the HTTP API of the member at addr (host:port),
// through h, reading at most limit bytes of the answer, and decodes a 200 answer into
// v. It returns the status: what another one means is the caller's to say.
func getJSON(ctx context.Context, h HTTP, addr, path string, limit int64, v any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url(addr, path), nil)
	if err != nil {
		return 0, err
	}
	resp, err := h.client().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	// Read to the end (bounded), so the connection is kept for the next ask.
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, v); err != nil {
			return 0, fmt.Errorf("GET %s: %w", path, err)
		}
	}
	return resp.StatusCode, nil
}
