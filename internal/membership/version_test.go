package membership

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/replica"
)

// TestClusterVersionTarget: the cluster moves to the highest version every
// member applies, and stays where it is while any member cannot say.
func TestClusterVersionTarget(t *testing.T) {
	top := command.ClusterVersionMax
	answers := map[string]uint64{"new:1": top, "new:2": top, "old:1": 1}
	ask := func(_ replica.NodeID, addr string) (uint64, error) {
		if v, ok := answers[addr]; ok {
			return v, nil
		}
		return 0, errors.New("connection refused")
	}
	for _, tc := range []struct {
		name  string
		cur   uint64
		addrs map[replica.NodeID]string
		want  uint64
	}{
		{"alone", 1, nil, top},
		{"every member applies it", 1, map[replica.NodeID]string{2: "new:1", 3: "new:2"}, top},
		{"a member from before cluster versions", 1, map[replica.NodeID]string{2: "new:1", 3: "old:1"}, 1},
		{"a member unreachable", 1, map[replica.NodeID]string{2: "new:1", 3: "down:1"}, 1},
		{"a member's address unknown", 1, map[replica.NodeID]string{2: "new:1", 3: ""}, 1},
		{"already there", top, map[replica.NodeID]string{2: "new:1"}, top},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := clusterVersionTarget(tc.cur, tc.addrs, ask)
			require.Equal(t, tc.want, got)
			if got == tc.cur && tc.addrs != nil {
				require.NotEmpty(t, why, "a held version says why")
			}
		})
	}
}

// TestAskMaxClusterVersion: what a member's HTTP API answers, including a
// kvd from before cluster versions (404), a server that is not kvd, and a
// kvd that is not the member asked (the table's address is stale: it
// moved, and another kvd listens there now).
func TestAskMaxClusterVersion(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   uint64
		err    bool
	}{
		{"this kvd", 200, `{"version":"x","id":"2","cluster_version":1,"max_cluster_version":2}`, 2, false},
		{"before cluster versions", 404, `{"error":"no such endpoint"}`, 1, false},
		{"not kvd", 200, `<html>`, 0, true},
		{"no version", 200, `{"id":"2"}`, 0, true},
		{"failing", 503, `{}`, 0, true},
		{"another member", 200, `{"version":"x","id":"3","cluster_version":1,"max_cluster_version":2}`, 0, true},
		{"a member that does not say", 200, `{"version":"x","cluster_version":1,"max_cluster_version":2}`, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				require.Equal(t, "/v1/version", r.URL.Path)
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			got, err := askMaxClusterVersion(context.Background(), HTTP{}, 2, strings.TrimPrefix(srv.URL, "http://"))
			if tc.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestVersionAddrsWaitForTheConfiguration: the member table is published
// inside apply, raft's configuration (Status) only after the Ready is
// handled. A table read that already holds a member added by a conf change
// the status does not list yet must not be asked from the status alone:
// the member would never be asked, yet the raise carries the fingerprint
// of a table that holds it, and apply would accept it.
func TestVersionAddrsWaitForTheConfiguration(t *testing.T) {
	table := []fsm.Member{{ID: 1, Name: "n1", HTTPAddr: "h:1"}, {ID: 2, Name: "n2", HTTPAddr: "h:2"}, {ID: 3, Name: "n3", PeerAddr: "h:93"}}
	for _, tc := range []struct {
		name    string
		applied uint64
		ok      bool
	}{
		{"status older than the table", 9, false},
		{"status as of the table", 10, true},
		{"status newer than the table", 11, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := replica.Status{ID: 1, Applied: tc.applied, Voters: []replica.NodeID{1, 2}}
			if tc.applied >= 10 {
				st.Learners = []replica.NodeID{3} // added at 10
			}
			addrs, ok := versionAddrs(st, table, 10)
			require.Equal(t, tc.ok, ok)
			if ok {
				require.Contains(t, addrs, replica.NodeID(3), "the member added is asked (and holds: no address yet)")
			}
		})
	}
}
