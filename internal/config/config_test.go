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
