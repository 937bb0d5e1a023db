// Package version owns kvd's version strings: the release of kvd itself and
// the memcached-compatible version it reports on the memcache port.
package version

// Version is kvd's own release, overridden at link time with
// -ldflags "-X github.com/kvd-project/kvd/internal/version.Version=…".
var Version = "0.1.0-dev"

// Memcached is what the memcache `version` command answers. Clients gate
// features on it (touch and gat need 1.4.8+ and 1.5.3+; meta commands 1.6),
// so it must be a plain memcached 1.6 release number: some clients parse
// exactly three dotted integers.
const Memcached = "1.6.21"
