package robustness

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

func TestFaultRegistry(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range Faults() {
		if f.Name == "" || f.Inject == nil || len(f.Topologies) == 0 {
			t.Errorf("incomplete fault %+v", f)
		}
		// Every fault of three data members runs with a witness too:
		// one that cannot must be taken out here, with its reason.
		if f.Fits(ThreeNodes) && !f.Fits(TwoAndWitness) {
			t.Errorf("fault %s runs on 3n but not on 2n+1w", f.Name)
		}
		if seen[f.Name] {
			t.Errorf("fault %s registered twice", f.Name)
		}
		seen[f.Name] = true
		if g, err := FaultByName(f.Name); err != nil || g.Name != f.Name {
			t.Errorf("FaultByName(%s) = %v, %v", f.Name, g.Name, err)
		}
	}
	if _, err := FaultByName("no-such-fault"); err == nil {
		t.Error("an unknown fault name was accepted")
	}
}

// TestClusterFaultsRegistered: the snapshot and membership faults are in
// the registry, need three members (data members or two and a witness),
// and the ones that need a compacted log set small compaction flags.
func TestClusterFaultsRegistered(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"snapshot-follower", []string{"--snapshot-count", "50", "--snapshot-catchup-entries", "50"}},
		{"transfer-leader", nil},
		{"replace-follower", []string{"--snapshot-count", "50", "--snapshot-catchup-entries", "50"}},
	}
	for _, tt := range tests {
		f, err := FaultByName(tt.name)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !slices.Equal(f.Topologies, []Topology{ThreeNodes, TwoAndWitness}) {
			t.Errorf("%s: topologies %v, want [3n 2n+1w]", tt.name, f.Topologies)
		}
		if !slices.Equal(f.Args, tt.args) {
			t.Errorf("%s: args %q, want %q", tt.name, f.Args, tt.args)
		}
	}
}

func TestConfigKVDArgs(t *testing.T) {
	cfg := Config{Fault: Fault{Args: []string{"--snapshot-count", "50"}}, ExtraArgs: []string{"--snapshot-count", "7"}}
	// The explicit -kvd-args come last, so they win.
	if got, want := cfg.kvdArgs(), []string{"--snapshot-count", "50", "--snapshot-count", "7"}; !slices.Equal(got, want) {
		t.Errorf("kvdArgs = %q, want %q", got, want)
	}
	if &cfg.kvdArgs()[0] == &cfg.Fault.Args[0] {
		t.Error("kvdArgs aliases the fault's Args")
	}
}

func TestJoinArgs(t *testing.T) {
	tests := []struct {
		name    string
		in      []string
		witness bool
		want    []string
	}{
		{
			name: "founding member",
			in:   []string{"serve", "--name", "n2", "--initial-cluster", "n1=a:1,n2=a:2", "--snapshot-count", "50"},
			want: []string{"serve", "--name", "n2", "--snapshot-count", "50", "--join", "http://h:1", "--advertise-peer-addr", "p:2"},
		},
		{
			name: "no initial cluster",
			in:   []string{"serve", "--name", "n2"},
			want: []string{"serve", "--name", "n2", "--join", "http://h:1", "--advertise-peer-addr", "p:2"},
		},
		{
			name:    "founding witness",
			in:      []string{"serve", "--name", "n3", "--initial-cluster", "n1=a:1,n2=a:2,n3=a:3", "--initial-witnesses", "n3", "--snapshot-count", "50"},
			witness: true,
			want:    []string{"serve", "--name", "n3", "--snapshot-count", "50", "--witness", "--join", "http://h:1", "--advertise-peer-addr", "p:2"},
		},
	}
	for _, tt := range tests {
		if got := joinArgs(tt.in, "http://h:1", "p:2", tt.witness); !slices.Equal(got, tt.want) {
			t.Errorf("%s: joinArgs = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestMetric(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# HELP kvd_raft_snapshots_installed_total Snapshots.\n"+
			"# TYPE kvd_raft_snapshots_installed_total counter\n"+
			"kvd_raft_snapshots_installed_total_extra 9\n"+
			"kvd_raft_snapshots_installed_total 2\n"+
			"kvd_raft_snapshots_sent_total 1e+00\n")
	}))
	defer srv.Close()
	c := &Cluster{http: srv.Client()}
	n := &Node{Name: "n1", HTTPAddr: strings.TrimPrefix(srv.URL, "http://")}
	tests := []struct {
		metric  string
		want    float64
		wantErr bool
	}{
		{metricSnapInstalled, 2, false},
		{metricSnapSent, 1, false},
		{metricSnapReceived, 0, true},
	}
	for _, tt := range tests {
		got, err := c.metric(context.Background(), n, tt.metric)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("metric(%s) = %v, %v; want %v, error %v", tt.metric, got, err, tt.want, tt.wantErr)
		}
	}
}
