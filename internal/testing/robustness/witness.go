package robustness

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"time"
)

// metricItems is the state store's item count (internal/metrics): 0 on a
// witness, whatever the data members hold.
const metricItems = "kvd_storage_items"

// checkWitnesses checks, after the final reads, what makes a witness one,
// so that a 2n+1w run cannot quietly be a run of three data members (the
// third unused) and a witness that misbehaves fails the run:
//
//   - every data member lists each witness as a voter marked witness;
//   - a witness refuses a data request (SERVER_ERROR this member is a
//     witness …) and holds no item (kvd_storage_items is 0);
//   - no member's log, across every restart of the run, says that a
//     witness became leader.
//
// It returns the failures; none for a cluster without witnesses.
func checkWitnesses(ctx context.Context, c *Cluster, logf func(string, ...any)) []string {
	var out []string
	for _, w := range c.Witnesses() {
		before := len(out)
		for _, n := range c.DataNodes() {
			var v memberView
			if err := c.getJSON(ctx, "http://"+n.HTTPAddr+"/v1/cluster", &v); err != nil {
				out = append(out, fmt.Sprintf("witness %s: membership as %s sees it: %v", w.Name, n.Name, err))
				continue
			}
			if m, ok := v.member(w.Name); !ok || !m.Witness || m.Kind != "voter" {
				out = append(out, fmt.Sprintf("witness %s: %s lists it as %+v (found %v), want a voter marked witness", w.Name, n.Name, m, ok))
			}
		}
		if err := refusesData(w.MemcacheAddr, c.Timing.RequestTimeout, w.sec); err != nil {
			out = append(out, fmt.Sprintf("witness %s: %v", w.Name, err))
		}
		if items, err := c.metric(ctx, w, metricItems); err != nil || items != 0 {
			out = append(out, fmt.Sprintf("witness %s holds data: %s %g (%v)", w.Name, metricItems, items, err))
		}
		for _, n := range c.Nodes {
			if l := ledBy(n.LogPath, w.ID); l != "" {
				out = append(out, fmt.Sprintf("witness %s became leader, as %s logged: %s", w.Name, n.Name, l))
			}
		}
		if len(out) == before {
			logf("witness %s: a voter marked witness on every data member, refuses data, holds no item, never led", w.Name)
		}
	}
	return out
}

// member finds a member by name in a /v1/cluster view.
func (v memberView) member(name string) (viewMember, bool) {
	for _, m := range v.Members {
		if m.Name == name {
			return m, true
		}
	}
	return viewMember{}, false
}

// refusesData sends a witness one get and wants its refusal.
func refusesData(addr string, timeout time.Duration, sec *Security) error {
	mc, err := dialMC(addr, timeout, sec)
	if err != nil {
		return err
	}
	defer mc.Close()
	_, err = mc.get(finalKey, false)
	if err == nil || !strings.Contains(err.Error(), "SERVER_ERROR this member is a witness") {
		return fmt.Errorf("a data request was not refused as a witness refuses it: %v", err)
	}
	return nil
}

// ledBy returns the first "leader changed" line of a node's log that names
// id as the new leader ("" if none).
func ledBy(path string, id uint64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	to := fmt.Sprintf(" to=%d ", id)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, `msg="leader changed"`) && strings.Contains(l, to) {
			return l
		}
	}
	return ""
}
