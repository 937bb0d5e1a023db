package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	require.NoError(t, c.Validate())
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := Default()
	c.MaxItemSize = 10
	c.ReadConsistency = "sometimes"
	c.ElectionTimeout = c.HeartbeatInterval
	c.InitialCluster = "other=127.0.0.1:1"
	c.MaxPending = 0
	c.HTTPAddr = "127.0.0.1:99999"
	c.AdvertiseMemcacheAddr = "kvd1:0"
	c.TimerSlack = -time.Millisecond
	err := c.Validate()
	require.Error(t, err)
	for _, want := range []string{"max-item-size", "read-consistency", "election-timeout", "does not name this member", "max-pending",
		`http-addr "127.0.0.1:99999": port`, "advertise-memcache-addr", "timer-slack -1ms"} {
		require.Contains(t, err.Error(), want)
	}
}

func TestMembers(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Member
		err  bool
	}{
		{"", []Member{{Name: "n1", PeerAddr: "127.0.0.1:11290"}}, false},
		{"n2=h:2,n1=http://h:1", []Member{{"n1", "h:1"}, {"n2", "h:2"}}, false},
		{"n1=h:1,n1=h:2", nil, true},
		{"n1", nil, true},
		{"n1=nohost", nil, true},
		{"n1=h:99999", nil, true},
		{"n1=h:0", nil, true},
		{"n1=h:1, n2=h:2", []Member{{"n1", "h:1"}, {"n2", "h:2"}}, false},
		// The others would dial themselves.
		{"n1=h:1,n2=:2", nil, true},
		{"n1=h:1,n2=0.0.0.0:2", nil, true},
		{"n1=[::]:1,n2=h:2", nil, true},
		// A lone member's entry is where it listens, like the default.
		{"n1=0.0.0.0:1", []Member{{"n1", "0.0.0.0:1"}}, false},
		// Two members cannot share a peer address.
		{"n1=h:1,n2=h:1", nil, true},
		{"n1=h:1,n2=http://h:1", nil, true},
	} {
		c := Default()
		c.Name, c.InitialCluster = "n1", tc.in
		got, err := c.Members()
		if tc.err {
			require.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]Size{"1048576": 1 << 20, "1024k": 1 << 20, "1m": 1 << 20, "1MiB": 1 << 20, "2g": 2 << 30} {
		got, err := ParseSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "lots", "-1", "1t"} {
		_, err := ParseSize(in)
		require.Error(t, err, in)
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "kvd.yaml")
	require.NoError(t, os.WriteFile(good, []byte("name: a\nmax-item-size: 2m\nrequest-timeout: 3s\n"), 0o600))
	c := Default()
	require.NoError(t, c.LoadFile(good))
	require.Equal(t, "a", c.Name)
	require.Equal(t, Size(2<<20), c.MaxItemSize)

	typo := filepath.Join(dir, "typo.yaml")
	require.NoError(t, os.WriteFile(typo, []byte("max-item-sise: 2m\n"), 0o600))
	c = Default()
	require.Error(t, c.LoadFile(typo), "an unknown key must not silently fall back to a default")
}

// A file with nothing to apply leaves the defaults; a second document that
// sets anything is refused rather than silently ignored, and leaves the
// configuration as it was.
func TestLoadFileDocuments(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		wantName   string // "" = the default is kept
		err        string
	}{
		{name: "empty", body: ""},
		{name: "blank lines", body: "\n\n"},
		{name: "comments only", body: "# name: n1\n# max-item-size: 2m\n"},
		{name: "document marker only", body: "---\n"},
		{name: "leading marker", body: "---\nname: n1\n", wantName: "n1"},
		{name: "trailing empty document", body: "name: n1\n---\n# nothing here\n", wantName: "n1"},
		{name: "second document", body: "name: n1\n---\nmax-item-size: 2m\nno-such-key: 1\n", err: "more than one YAML document (another starts at line 2)"},
		{name: "second document after end marker", body: "name: n1\n...\n---\nname: n2\n", err: "more than one YAML document"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "kvd.yaml")
			require.NoError(t, os.WriteFile(p, []byte(tc.body), 0o600))
			c := Default()
			err := c.LoadFile(p)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.Equal(t, Default(), c, "a refused file changes nothing")
				return
			}
			require.NoError(t, err)
			want := Default()
			if tc.wantName != "" {
				want.Name = tc.wantName
			}
			require.Equal(t, want, c)
		})
	}
}

// Raft counts the election timeout in heartbeat ticks: a timeout between two
// multiples is refused, not silently rounded down.
func TestValidateElectionTimeoutIsWholeTicks(t *testing.T) {
	for _, tc := range []struct {
		heartbeat, election time.Duration
		err                 string
	}{
		{50 * time.Millisecond, 500 * time.Millisecond, ""},
		{150 * time.Millisecond, 450 * time.Millisecond, ""},
		{150 * time.Millisecond, 500 * time.Millisecond, "election-timeout 500ms: must be a multiple of heartbeat-interval (150ms), such as 450ms or 600ms"},
		{100 * time.Millisecond, 350 * time.Millisecond, "such as 300ms or 400ms"},
		{100 * time.Millisecond, 250 * time.Millisecond, "at least 3× heartbeat-interval"},
	} {
		c := Default()
		c.HeartbeatInterval, c.ElectionTimeout = tc.heartbeat, tc.election
		err := c.Validate()
		if tc.err == "" {
			require.NoError(t, err, "%v/%v", tc.heartbeat, tc.election)
			continue
		}
		require.ErrorContains(t, err, tc.err, "%v/%v", tc.heartbeat, tc.election)
	}
}

func TestCheckName(t *testing.T) {
	for _, name := range []string{"n1", "kvd-0.kvd.default.svc", "Ünïcode_名前", "a:b@c"} {
		require.NoError(t, CheckName(name), name)
	}
	for name, want := range map[string]string{
		"":         "empty",
		"rack1/n1": `'/'`,
		"a,b":      `','`,
		"a=b":      `'='`,
		"a b":      "spaces",
		"a\tb":     "spaces",
		"a\u00a0b": "spaces",
		"a\x00b":   "control characters",
		"a\x7fb":   "control characters",
		"a\xffb":   "UTF-8",
	} {
		require.ErrorContains(t, CheckName(name), want, "%q", name)
	}
}

// --name and every --initial-cluster member name follow CheckName, so no
// member can get a name the HTTP API would refuse; the error names the key.
func TestValidateMemberNames(t *testing.T) {
	for _, tc := range []struct {
		name, initialCluster, err string
	}{
		{"rack1/n1", "", `name "rack1/n1": must not contain '/'`},
		{"n 1", "", `name "n 1": must not contain spaces`},
		{"", "", `name "": must not be empty`},
		{"..", "", `name "..": must not be "." or ".."`},
		{"n1", "n1=127.0.0.1:1,.=127.0.0.1:2", `initial-cluster: member name ".": must not be "." or ".."`},
		{"n1", "n1=127.0.0.1:1,bad name/x=127.0.0.1:2", `initial-cluster: member name "bad name/x": must not contain`},
		{"n1", "n1=127.0.0.1:1,n\x01=127.0.0.1:2", `initial-cluster: member name "n\x01": must not contain control characters`},
	} {
		c := Default()
		c.Name, c.InitialCluster = tc.name, tc.initialCluster
		require.ErrorContains(t, c.Validate(), tc.err, "name %q, initial-cluster %q", tc.name, tc.initialCluster)
	}
}

func TestValidateWitnesses(t *testing.T) {
	const three = "n1=h:1,n2=h:2,w=h:3"
	for _, tc := range []struct {
		name                     string
		self, cluster, witnesses string
		witness                  bool
		join                     string
		err                      string
		isWitness                bool
	}{
		{name: "two data members and a witness", self: "n1", cluster: three, witnesses: "w"},
		{name: "the witness itself", self: "w", cluster: three, witnesses: " w ", isWitness: true},
		{name: "the witness says so twice", self: "w", cluster: three, witnesses: "w", witness: true, isWitness: true},
		{name: "three data members and a witness", self: "n1", cluster: three + ",n3=h:4", witnesses: "w"},
		{name: "a witness joins", self: "w", join: "http://h:11280", witness: true, isWitness: true},
		{name: "not a member", self: "n1", cluster: three, witnesses: "x", err: `initial-witnesses: "x" is not a member of initial-cluster`},
		{name: "listed twice", self: "n1", cluster: three, witnesses: "w,w", err: `"w" listed twice`},
		{name: "as many witnesses as data members", self: "n1", cluster: "n1=h:1,w=h:3", witnesses: "w", err: "data members must outnumber the witnesses"},
		{name: "more witnesses", self: "n1", cluster: three, witnesses: "w,n2", err: "2 witness(es) and 1 data member(s)"},
		{name: "witnesses with join", self: "n1", join: "http://h:11280", witnesses: "w", err: "a witness that joins says --witness"},
		{name: "a witness flag that the list contradicts", self: "n1", cluster: three, witnesses: "w", witness: true,
			err: `not named in initial-witnesses`, isWitness: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Name, c.InitialCluster, c.InitialWitnesses, c.Witness, c.Join = tc.self, tc.cluster, tc.witnesses, tc.witness, tc.join
			err := c.Validate()
			if tc.err == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tc.err)
			}
			require.Equal(t, tc.isWitness, c.IsWitness())
		})
	}
}

// --force-new-cluster recovers an existing data member: with --join, or on
// a witness, it is refused, with every other problem.
func TestValidateForceNewCluster(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tweak   func(*Config)
		wantErr string // "" valid
	}{
		{name: "a data member", tweak: func(*Config) {}},
		{name: "with join", tweak: func(c *Config) { c.Join = "http://h:11280" }, wantErr: "force-new-cluster and join"},
		{name: "a joining witness", tweak: func(c *Config) { c.Join, c.Witness = "http://h:11280", true }, wantErr: "a witness holds no data"},
		{name: "a founding witness", tweak: func(c *Config) {
			c.InitialCluster, c.InitialWitnesses = "a=h1:1,b=h2:1,"+c.Name+"=h3:1", c.Name
		}, wantErr: "a witness holds no data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.ForceNewCluster = true
			tc.tweak(&c)
			err := c.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}
