package compat

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// TestGeneralStatsCoverMemcached: kvd's `stats` prints every general field
// memcached 1.6.18 prints, in memcached's order (kvd's own fields may
// follow or sit between), so that monitoring tools and client suites that
// read a field find it. kvd lacked about sixty of them.
func TestGeneralStatsCoverMemcached(t *testing.T) {
	needMemcached(t)
	mc := statNames(t, startMemcached(t, memcachedBin))
	p := kvdproc.Start(t, t.TempDir())
	kvd := statNames(t, p.MemcacheAddr)
	require.Greater(t, len(mc), 80, "memcached's stats: %v", mc)

	at := map[string]int{}
	for i, name := range kvd {
		at[name] = i
	}
	var missing []string
	last := -1
	for _, name := range mc {
		i, ok := at[name]
		if !ok {
			missing = append(missing, name)
			continue
		}
		assert.Greater(t, i, last, "%s comes before the field memcached prints before it", name)
		last = i
	}
	assert.Empty(t, missing, "general stats memcached prints and kvd does not")
}

// statNames reads `stats` on a connection of its own and returns the field
// names in the order the server prints them.
func statNames(t *testing.T, addr string) []string {
	t.Helper()
	var names []string
	for _, st := range statLines(t, addr) {
		names = append(names, st[0])
	}
	return names
}

// statLines reads `stats` on a connection of its own: each field's name and
// value, in the order the server prints them.
func statLines(t *testing.T, addr string) [][2]string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = c.Write([]byte("stats\r\n"))
	require.NoError(t, err)
	r := bufio.NewReader(c)
	var out [][2]string
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		line = strings.TrimSuffix(line, "\r\n")
		if line == "END" {
			return out
		}
		f := strings.SplitN(line, " ", 3)
		require.Len(t, f, 3, "line %q", line)
		require.Equal(t, "STAT", f[0], "line %q", line)
		out = append(out, [2]string{f[1], f[2]})
	}
}
