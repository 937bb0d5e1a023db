package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An advertised address is what other members and clients dial: a wildcard
// host there would have them dial themselves, so it is refused like any
// other unreachable address, naming the key.
func TestValidateRefusesWildcardAdvertiseAddrs(t *testing.T) {
	for _, tc := range []struct {
		key, addr string
		set       func(*Config, string)
	}{
		{"advertise-peer-addr", "0.0.0.0:11290", func(c *Config, a string) { c.AdvertisePeerAddr = a }},
		{"advertise-http-addr", "[::]:11280", func(c *Config, a string) { c.AdvertiseHTTPAddr = a }},
		{"advertise-memcache-addr", "0.0.0.0:11211", func(c *Config, a string) { c.AdvertiseMemcacheAddr = a }},
	} {
		c := Default()
		tc.set(&c, tc.addr)
		require.ErrorContains(t, c.Validate(), tc.key+` "`+tc.addr+`": want a reachable host:port`, tc.key)
	}
	c := Default()
	c.AdvertisePeerAddr, c.AdvertiseHTTPAddr, c.AdvertiseMemcacheAddr = "10.0.0.1:11290", "kvd-0.kvd-peer:11280", "[fd00::1]:11211"
	require.NoError(t, c.Validate())
}

// A size the file gets wrong is reported with its line, since several keys
// take sizes and the value alone does not say which one was meant.
func TestLoadFileBadSizeNamesTheLine(t *testing.T) {
	for _, tc := range []struct {
		body, err string
	}{
		{"name: n1\ncache-size: lots\n", `line 2: invalid size "lots"`},
		{"max-item-size: -1m\n", `line 1: invalid size "-1m"`},
		{"name: n1\n\nitem-cache-size: [1, 2]\n", `line 3: invalid size ""`},
	} {
		p := filepath.Join(t.TempDir(), "kvd.yaml")
		require.NoError(t, os.WriteFile(p, []byte(tc.body), 0o600))
		c := Default()
		err := c.LoadFile(p)
		require.ErrorContains(t, err, tc.err, "%q", tc.body)
		require.Equal(t, Default(), c, "a refused file changes nothing")
	}
}

// loadBody loads body as a config file over the defaults; a refused file
// must change nothing.
func loadBody(t *testing.T, body string) (Config, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kvd.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	c := Default()
	err := c.LoadFile(p)
	if err != nil {
		require.Equal(t, Default(), c, "a refused file changes nothing")
	}
	return c, err
}

// A config file key reads a value as its flag does: "timer-slack: 0"
// (documented: 0 keeps the inherited slack) was refused as an integer
// where --timer-slack 0 is accepted, and yaml truncated a fraction into a
// whole-number key ("max-connections: 1.5" was 1) where the flag refuses
// it. Unknown keys stay errors.
func TestLoadFileReadsValuesAsTheFlags(t *testing.T) {
	for _, tc := range []struct {
		body string
		want func(*Config) any // reads the key's field, compared with is
		is   any
		err  string
	}{
		{body: "timer-slack: 0\n", want: timerSlack, is: time.Duration(0)},
		{body: "timer-slack: 0s\n", want: timerSlack, is: time.Duration(0)},
		{body: "timer-slack: 2ms\n", want: timerSlack, is: 2 * time.Millisecond},
		{body: "timer-slack: \"0\"\n", want: timerSlack, is: time.Duration(0)},
		// Like --request-timeout 5: a number without its unit.
		{body: "request-timeout: 5\n", err: "line 1: cannot unmarshal"},
		{body: "timer-slack: 0\nrequest-timout: 5s\n", err: `line 2: unknown key "request-timout"`},
		{body: "max-connections: 100\n", want: func(c *Config) any { return c.MaxConnections }, is: 100},
		{body: "max-connections: 1.5\n", err: `line 1: max-connections: "1.5" is not a whole number`},
		{body: "snapshot-count: 2.7\n", err: `line 1: snapshot-count: "2.7" is not a whole number`},
		{body: "max-connections: 1e3\n", err: `"1e3" is not a whole number`},
	} {
		t.Run(tc.body, func(t *testing.T) {
			c, err := loadBody(t, tc.body)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.is, tc.want(&c))
		})
	}
}

func timerSlack(c *Config) any { return c.TimerSlack }

// Two listeners on one port fail at start with the system's "address
// already in use", which names neither flag; Validate names both. A
// wildcard host overlaps every host; port 0 picks a free port for each.
func TestValidateRefusesListenersOnOnePort(t *testing.T) {
	for _, tc := range []struct {
		mc, http, peer string
		err            string // "" when valid
	}{
		{"127.0.0.1:11211", "127.0.0.1:11211", "127.0.0.1:11290", `http-addr "127.0.0.1:11211": the same port as memcache-addr "127.0.0.1:11211"`},
		{"127.0.0.1:11211", "127.0.0.1:11280", "0.0.0.0:11280", `peer-addr "0.0.0.0:11280": the same port as http-addr "127.0.0.1:11280"`},
		{":7000", "127.0.0.1:11280", "[::1]:7000", `peer-addr "[::1]:7000": the same port as memcache-addr ":7000"`},
		{"127.0.0.1:7000", "127.0.0.2:7000", "127.0.0.1:11290", ""},
		{"127.0.0.1:7000", "127.0.0.1:07000", "127.0.0.1:11290", `http-addr "127.0.0.1:07000": the same port as memcache-addr "127.0.0.1:7000"`},
		{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", ""},
	} {
		c := Default()
		c.MemcacheAddr, c.HTTPAddr, c.PeerAddr = tc.mc, tc.http, tc.peer
		err := c.Validate()
		if tc.err == "" {
			require.NoError(t, err, "%+v", tc)
		} else {
			require.ErrorContains(t, err, tc.err)
		}
	}
}
