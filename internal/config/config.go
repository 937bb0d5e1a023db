// Package config owns kvd serve's configuration: one struct whose fields
// document unit, default and relations; Default() is complete; Validate()
// reports every problem at once. A YAML file (--config) uses the same keys as
// the flags; flags given on the command line override the file.
package config

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Config is everything `kvd serve` needs.
type Config struct {
	// Name is this member's name in --initial-cluster (default: the host
	// name); CheckName says which names are allowed.
	Name string `yaml:"name"`
	// DataDir holds raft/ (the log) and state/ (the data). Default ./kvd-data.
	DataDir string `yaml:"data-dir"`
	// MemcacheAddr is the memcached text-protocol listener (TCP only; kvd
	// never speaks UDP). Default 127.0.0.1:11211.
	MemcacheAddr string `yaml:"memcache-addr"`
	// HTTPAddr serves /healthz, /readyz and the HTTP API. Default 127.0.0.1:11280.
	HTTPAddr string `yaml:"http-addr"`
	// PeerAddr is where peers reach this member's raft transport. Default 127.0.0.1:11290.
	PeerAddr string `yaml:"peer-addr"`
	// InitialCluster lists the founding members as name=host:port,… ; it must
	// name this member. Used only on first start (empty data dir). Default:
	// this member alone.
	InitialCluster string `yaml:"initial-cluster"`
	// Join is the HTTP address of a running member (http://host:port, or
	// https://user:password@host:port when the members speak TLS and take
	// Basic credentials): on first start the node asks it to add this node
	// as a learner and joins that cluster instead of founding one. Ignored
	// once the data dir holds a cluster. Logs and errors show it through
	// RedactURL.
	Join string `yaml:"join"`
	// InitialWitnesses names the members of InitialCluster that are
	// witnesses (comma-separated): voters that hold no data and serve no
	// data requests, so that two data members and a witness survive the
	// loss of any one (docs/witness.md). Every founding member gets the
	// same list. Used only on first start.
	InitialWitnesses string `yaml:"initial-witnesses"`
	// Witness makes this member a witness. A founding witness is named in
	// InitialWitnesses and needs nothing more; a witness joining with Join
	// says so here. Recorded in the data dir at the first start.
	Witness bool `yaml:"witness"`
	// ForceNewCluster recovers from a lost quorum (docs/backup.md,
	// "Disaster recovery"): at this start, the existing data dir's member
	// becomes the only voter of its cluster, keeping every entry of its
	// log, and others can then join it. It may lose writes the lost
	// majority committed that never reached this member, and keep writes
	// whose outcome was reported unknown. A one-time action: a member that
	// is already the only voter starts as usual with a warning. Refused
	// on an empty data dir, with Join, and for a witness. Default false.
	ForceNewCluster bool `yaml:"force-new-cluster"`
	// AdvertisePeerAddr, AdvertiseHTTPAddr and AdvertiseMemcacheAddr are the
	// addresses other members and clients use to reach this node, published
	// in the member table; never a wildcard host. Default: the listen
	// address (for the peer address of a founding member, its entry in
	// InitialCluster), with a wildcard host (0.0.0.0, ::) replaced by the
	// host name.
	AdvertisePeerAddr     string `yaml:"advertise-peer-addr"`
	AdvertiseHTTPAddr     string `yaml:"advertise-http-addr"`
	AdvertiseMemcacheAddr string `yaml:"advertise-memcache-addr"`

	// MaxItemSize is the largest value accepted, in bytes (suffixes k, m: 1m =
	// 1 MiB). Default 1m, like memcached's -I. Range 1k..128m.
	MaxItemSize Size `yaml:"max-item-size"`
	// MaxConnections bounds concurrent memcache connections; one more is
	// answered "ERROR Too many open connections" and closed. Default 4096.
	MaxConnections int `yaml:"max-connections"`
	// MaxPending bounds writes proposed to the raft log and not yet applied
	// on this node; one more is refused at once ("SERVER_ERROR busy: too
	// many requests in flight", HTTP 503 busy) instead of queueing without
	// bound. Default 16384; at least 1.
	MaxPending int `yaml:"max-pending"`
	// RequestTimeout bounds every request from arrival to reply; without a
	// quorum, requests fail with SERVER_ERROR after it. Default 5s.
	RequestTimeout time.Duration `yaml:"request-timeout"`
	// ReadConsistency is the default read path: linearizable (ReadIndex),
	// lease (leader lease, needs CheckQuorum, which kvd always enables) or
	// local (this node's state, may be stale). Default linearizable.
	ReadConsistency string `yaml:"read-consistency"`
	// HeartbeatInterval is the raft tick and leader heartbeat period. Default 50ms.
	HeartbeatInterval time.Duration `yaml:"heartbeat-interval"`
	// ElectionTimeout is how long followers wait without a heartbeat before an
	// election; a multiple of HeartbeatInterval (raft counts it in ticks), at
	// least 3×. Default 500ms: with raft's randomisation a leader loss is
	// noticed within 0.5–1s, which keeps client-observed failover under a
	// second (bench/failover.sh).
	ElectionTimeout time.Duration `yaml:"election-timeout"`
	// SnapshotCount is how many applied entries pass between raft log
	// compactions (etcd's --snapshot-count). Default 10000; at least 1.
	// The replica also compacts after 16 MiB of entry data, and keeps at
	// most 16 MiB of entries behind (replica.Config.CompactEveryBytes).
	SnapshotCount uint64 `yaml:"snapshot-count"`
	// SnapshotCatchupEntries is how many entries a compaction keeps behind
	// the applied index, so that a briefly slow follower catches up from the
	// log; one further behind is sent a snapshot (etcd's
	// --snapshot-catchup-entries). Default 5000; at least 1.
	SnapshotCatchupEntries uint64 `yaml:"snapshot-catchup-entries"`
	// MinFreeDisk is the free space (bytes; k/m/g suffixes) below which the
	// data dir's filesystem counts as full: writes that add data are refused
	// ("SERVER_ERROR out of memory storing object", HTTP 507) while reads,
	// deletes and flush_all go on, until free space is back above the
	// floor plus an eighth of it (checked every second). A write the raft log fails to persist stops the node, so
	// this refuses them politely first. Default 64m; 0 turns it off.
	MinFreeDisk Size `yaml:"min-free-disk"`
	// CacheSize is Pebble's block cache for the state store. Default 64m.
	CacheSize Size `yaml:"cache-size"`
	// ItemCacheSize bounds the cache of recently read and written items in
	// front of the state store (hot gets skip Pebble). Default 64m; 0 off.
	ItemCacheSize Size `yaml:"item-cache-size"`
	// ShutdownTimeout bounds the graceful drain on SIGTERM, and again the
	// stop of raft and the close of the stores after it (a disk that
	// refuses writes can hold those forever). Default 10s.
	ShutdownTimeout time.Duration `yaml:"shutdown-timeout"`
	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string `yaml:"log-level"`
	// TimerSlack is the kernel's timer slack for every kvd thread (Linux
	// only; package timerslack says why kvd sets it). Default 1ms; 0 keeps
	// the slack kvd was started with; at most 100ms.
	TimerSlack time.Duration `yaml:"timer-slack"`
	// EnablePprof serves Go's profiler at /debug/pprof/ on the HTTP listener.
	// Default off.
	EnablePprof bool `yaml:"enable-pprof"`

	// CertFile and KeyFile (PEM) make the memcache and HTTP listeners speak
	// TLS only, as memcached's -Z makes its port TLS-only: one port, one
	// protocol, so a plaintext client is never served by mistake. Both or
	// neither. Re-read without a restart (SIGHUP, or when the files change).
	CertFile string `yaml:"cert-file"`
	KeyFile  string `yaml:"key-file"`
	// TrustedCAFile (PEM) is the CA that signs client certificates; with
	// ClientCertAuth a client must present one it signed. Without
	// ClientCertAuth a client certificate is asked for and verified if
	// given (memcached's ssl_verify_mode "request").
	TrustedCAFile  string `yaml:"trusted-ca-file"`
	ClientCertAuth bool   `yaml:"client-cert-auth"`
	// TLSMinVersion is the oldest TLS version accepted on every listener:
	// 1.2 or 1.3. Default 1.2.
	TLSMinVersion string `yaml:"tls-min-version"`
	// PeerCertFile, PeerKeyFile and PeerTrustedCAFile turn on mutual TLS
	// between members (raft messages and snapshot streams): each member
	// presents its certificate, verifies the other's against the CA, and
	// checks that it names the member it claims to be (a DNS name in its
	// subject alternative names, or its common name, equal to the member
	// name). All three or none; a member with them refuses plaintext peers.
	PeerCertFile      string `yaml:"peer-cert-file"`
	PeerKeyFile       string `yaml:"peer-key-file"`
	PeerTrustedCAFile string `yaml:"peer-trusted-ca-file"`
	// AuthFile is an htpasswd file of bcrypt hashes (htpasswd -B): with it,
	// every memcache connection must authenticate (binary SASL PLAIN, or
	// the text protocol's "set" exchange) and the HTTP data and admin APIs
	// need HTTP Basic credentials from it. Re-read when it changes.
	AuthFile string `yaml:"auth-file"`
}

// Default returns the configuration used when nothing is given.
func Default() Config {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "kvd"
	}
	return Config{
		Name:                   name,
		DataDir:                "./kvd-data",
		MemcacheAddr:           "127.0.0.1:11211",
		HTTPAddr:               "127.0.0.1:11280",
		PeerAddr:               "127.0.0.1:11290",
		MaxItemSize:            1 << 20,
		MaxConnections:         4096,
		MaxPending:             16384,
		RequestTimeout:         5 * time.Second,
		ReadConsistency:        "linearizable",
		HeartbeatInterval:      50 * time.Millisecond,
		ElectionTimeout:        500 * time.Millisecond,
		SnapshotCount:          10000,
		SnapshotCatchupEntries: 5000,
		CacheSize:              64 << 20,
		ItemCacheSize:          64 << 20,
		MinFreeDisk:            64 << 20,
		ShutdownTimeout:        10 * time.Second,
		LogLevel:               "info",
		TimerSlack:             time.Millisecond,
		TLSMinVersion:          "1.2",
	}
}

// LoadFile overlays the YAML file at path onto c; on error c is unchanged.
// Unknown keys are errors, so a typo never silently falls back to a default.
// A file with no document (empty, or comments only) sets nothing. A second
// document (after "---") that sets anything is an error: the decoder would
// otherwise read the first and never look at the rest, unknown keys and all.
func (c *Config) LoadFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read config file: %w", err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	loaded := *c
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil
	} else if err != nil {
		return fmt.Errorf("parse config file %s: %w", path, err)
	}
	if err := asFlags(&doc); err != nil {
		return fmt.Errorf("parse config file %s: %w", path, err)
	}
	if err := doc.Decode(&loaded); err != nil {
		return fmt.Errorf("parse config file %s: %w", path, err)
	}
	for {
		var next yaml.Node
		err := dec.Decode(&next)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("parse config file %s: %w", path, err)
		}
		if !emptyDocument(&next) {
			return fmt.Errorf("parse config file %s: more than one YAML document (another starts at line %d); put every key in the first",
				path, next.Line)
		}
	}
	*c = loaded
	return nil
}

// fileKeys maps each config file key to the kind of its field.
var fileKeys = func() map[string]reflect.Kind {
	keys := map[string]reflect.Kind{}
	typ := reflect.TypeOf(Config{})
	for i := range typ.NumField() {
		kind := typ.Field(i).Type.Kind()
		if typ.Field(i).Type == reflect.TypeOf(time.Duration(0)) {
			kind = reflect.Invalid // a duration, not a number
		}
		keys[typ.Field(i).Tag.Get("yaml")] = kind
	}
	return keys
}()

// asFlags refuses unknown keys (a node decodes without the decoder's
// KnownFields) and reads values as the flags do where yaml would not:
//   - A duration written as a bare number: "timer-slack: 0" is the
//     documented "0: keep", which yaml refuses as an integer where
//     --timer-slack 0 is accepted; any other bare number still fails for
//     its missing unit, as the flag does.
//   - A fraction for a whole number: yaml truncates "max-connections: 1.5"
//     to 1 without a word, where the flag refuses it.
func asFlags(doc *yaml.Node) error {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil // Decode reports what is not a mapping
	}
	var errs []error
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Tag == "!!merge" {
			continue
		}
		kind, known := fileKeys[k.Value]
		if !known {
			errs = append(errs, fmt.Errorf("line %d: unknown key %q", k.Line, k.Value))
			continue
		}
		if v.Kind != yaml.ScalarNode {
			continue
		}
		switch {
		case kind == reflect.Invalid && v.Tag == "!!int":
			v.Tag = "!!str"
		case v.Tag == "!!float" && (reflect.Int <= kind && kind <= reflect.Uint64):
			errs = append(errs, fmt.Errorf("line %d: %s: %q is not a whole number", v.Line, k.Value, v.Value))
		}
	}
	return errors.Join(errs...)
}

// emptyDocument: a document that sets nothing, like the one a trailing
// "---" opens.
func emptyDocument(doc *yaml.Node) bool {
	if len(doc.Content) == 0 {
		return true
	}
	n := doc.Content[0]
	return len(doc.Content) == 1 && n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// CheckName reports why name cannot be a member name, or nil. It is the one
// rule for --name, the names in --initial-cluster and POST
// /v1/cluster/members, because a name travels through places that each
// reserve characters: --initial-cluster splits on ',' and '=', the member
// path /v1/cluster/members/{name} on '/', and logs and `kvd cluster status`
// on spaces and control characters; JSON would mangle invalid UTF-8. A name
// one entry point accepted and another refused would make a member that
// cannot be named, so cannot be removed.
func CheckName(name string) error {
	if name == "" {
		return errors.New("must not be empty")
	}
	if !utf8.ValidString(name) {
		return errors.New("must be valid UTF-8")
	}
	if name == "." || name == ".." {
		// A URL path cleans them away: /v1/cluster/members/.. is the
		// members list, so such a member could never be removed.
		return errors.New(`must not be "." or ".."`)
	}
	for _, r := range name {
		switch {
		case r == '/' || r == ',' || r == '=':
			return fmt.Errorf("must not contain %q", r)
		case unicode.IsSpace(r):
			return errors.New("must not contain spaces")
		case unicode.IsControl(r):
			return fmt.Errorf("must not contain control characters (%U)", r)
		}
	}
	return nil
}

// Member is one entry of the initial cluster.
type Member struct {
	Name     string
	PeerAddr string
}

// Members parses InitialCluster; empty means this member alone.
func (c *Config) Members() ([]Member, error) {
	if strings.TrimSpace(c.InitialCluster) == "" {
		return []Member{{Name: c.Name, PeerAddr: c.PeerAddr}}, nil
	}
	parts := strings.Split(c.InitialCluster, ",")
	var out []Member
	seen := map[string]bool{}
	at := map[string]string{} // address → the member listed there
	for _, part := range parts {
		name, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("initial-cluster: %q is not name=host:port", part)
		}
		if err := CheckName(name); err != nil {
			return nil, fmt.Errorf("initial-cluster: member name %q: %w", name, err)
		}
		addr = strings.TrimPrefix(strings.TrimPrefix(addr, "http://"), "https://")
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("initial-cluster: member %s: %w", name, err)
		} else if !validPort(port, false) {
			return nil, fmt.Errorf("initial-cluster: member %s: port %q must be a number from 1 to 65535", name, port)
		}
		// The other members dial each entry as it is written: an empty or
		// wildcard host would have them dial themselves. Only a lone
		// member's entry is where to listen (its node advertises its host
		// name instead), like the default.
		if len(parts) > 1 && wildcardHost(host) {
			return nil, fmt.Errorf("initial-cluster: member %s: %q is where to listen, not where the others reach it: give its host name or address", name, addr)
		}
		if seen[name] {
			return nil, fmt.Errorf("initial-cluster: member %s listed twice", name)
		}
		seen[name] = true
		if other, ok := at[addr]; ok {
			return nil, fmt.Errorf("initial-cluster: members %s and %s have the same address %s", other, name, addr)
		}
		at[addr] = name
		out = append(out, Member{Name: name, PeerAddr: addr})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// validPort: a TCP port number; 0 (any free port) only where listening.
func validPort(port string, listen bool) bool {
	n, err := strconv.ParseUint(port, 10, 16)
	return err == nil && (n > 0 || listen)
}

// checkListenersApart reports two of the three listeners given the same
// port on overlapping hosts (the same host, or a wildcard beside any):
// the second listen would fail at start with the system's "address already
// in use", naming neither flag. Port 0 picks a free port for each.
func (c *Config) checkListenersApart(add func(string, ...any)) {
	type listener struct {
		flag, addr, host string
		port             uint64
	}
	var seen []listener
	for _, l := range []struct{ flag, addr string }{{"memcache-addr", c.MemcacheAddr}, {"http-addr", c.HTTPAddr}, {"peer-addr", c.PeerAddr}} {
		host, p, err := net.SplitHostPort(l.addr)
		port, perr := strconv.ParseUint(p, 10, 16)
		if err != nil || perr != nil || port == 0 {
			continue // reported as malformed, or a free port each
		}
		for _, s := range seen {
			if s.port == port && (s.host == host || wildcardHost(s.host) || wildcardHost(host)) {
				add("%s %q: the same port as %s %q; each listener needs its own", l.flag, l.addr, s.flag, s.addr)
			}
		}
		seen = append(seen, listener{l.flag, l.addr, host, port})
	}
}

func wildcardHost(h string) bool {
	ip := net.ParseIP(h)
	return h == "" || (ip != nil && ip.IsUnspecified())
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := CheckName(c.Name); err != nil {
		add("name %q: %w", c.Name, err)
	}
	if c.DataDir == "" {
		add("data-dir: must not be empty")
	}
	for flag, addr := range map[string]string{"memcache-addr": c.MemcacheAddr, "http-addr": c.HTTPAddr, "peer-addr": c.PeerAddr} {
		if _, port, err := net.SplitHostPort(addr); err != nil {
			add("%s %q: %v", flag, addr, err)
		} else if !validPort(port, true) {
			add("%s %q: port must be a number from 0 to 65535", flag, addr)
		}
	}
	c.checkListenersApart(add)
	if c.MaxItemSize < 1<<10 || c.MaxItemSize > 128<<20 {
		add("max-item-size %d: must be between 1k and 128m", c.MaxItemSize)
	}
	if c.MaxConnections < 1 {
		add("max-connections %d: must be at least 1", c.MaxConnections)
	}
	if c.MaxPending < 1 {
		add("max-pending %d: must be at least 1", c.MaxPending)
	}
	if c.RequestTimeout <= 0 {
		add("request-timeout %s: must be positive", c.RequestTimeout)
	}
	switch c.ReadConsistency {
	case "linearizable", "lease", "local":
	default:
		add("read-consistency %q: must be linearizable, lease or local", c.ReadConsistency)
	}
	if c.HeartbeatInterval < time.Millisecond {
		add("heartbeat-interval %s: must be at least 1ms", c.HeartbeatInterval)
	} else if c.ElectionTimeout < 3*c.HeartbeatInterval {
		add("election-timeout %s: must be at least 3× heartbeat-interval (%s)", c.ElectionTimeout, c.HeartbeatInterval)
	} else if rem := c.ElectionTimeout % c.HeartbeatInterval; rem != 0 {
		// Raft counts the timeout in ticks: anything past the last whole
		// tick would be dropped without a word.
		lower := c.ElectionTimeout - rem
		add("election-timeout %s: must be a multiple of heartbeat-interval (%s), such as %s or %s",
			c.ElectionTimeout, c.HeartbeatInterval, lower, lower+c.HeartbeatInterval)
	}
	if c.CacheSize < 1<<20 {
		add("cache-size %d: must be at least 1m", c.CacheSize)
	}
	if c.ShutdownTimeout <= 0 {
		add("shutdown-timeout %s: must be positive", c.ShutdownTimeout)
	}
	if c.TimerSlack < 0 || c.TimerSlack > 100*time.Millisecond {
		add("timer-slack %s: must be between 0 and 100ms", c.TimerSlack)
	}
	if c.SnapshotCount < 1 {
		add("snapshot-count %d: must be at least 1", c.SnapshotCount)
	}
	if c.SnapshotCatchupEntries < 1 {
		add("snapshot-catchup-entries %d: must be at least 1", c.SnapshotCatchupEntries)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		add("log-level %q: must be debug, info, warn or error", c.LogLevel)
	}
	for flag, addr := range map[string]string{"advertise-peer-addr": c.AdvertisePeerAddr,
		"advertise-http-addr": c.AdvertiseHTTPAddr, "advertise-memcache-addr": c.AdvertiseMemcacheAddr} {
		if addr == "" {
			continue
		}
		// A wildcard is where to listen, not where to dial: a member that
		// dials 0.0.0.0 or :: reaches itself.
		if host, port, err := net.SplitHostPort(addr); err != nil || host == "" || !validPort(port, false) {
			add("%s %q: want a reachable host:port", flag, addr)
		} else if wildcardHost(host) {
			add("%s %q: want a reachable host:port, not the wildcard %s", flag, addr, host)
		}
	}
	if c.ForceNewCluster {
		if c.Join != "" {
			add("force-new-cluster and join: give one (force-new-cluster recovers an existing member's data dir; join starts a new one)")
		}
		if c.IsWitness() {
			add("force-new-cluster: a witness holds no data to found a cluster on; force a data member, then join a new witness to it")
		}
	}
	if c.Join != "" {
		if c.InitialCluster != "" {
			add("join and initial-cluster: give one (join an existing cluster, or found a new one)")
		}
		if u, err := url.Parse(c.Join); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("join %q: want the HTTP address of a member, like http://host:11280", RedactURL(c.Join))
		}
	}
	c.checkSecurity(add)
	members, err := c.Members()
	if err != nil {
		errs = append(errs, err)
	} else {
		found := false
		for _, m := range members {
			found = found || m.Name == c.Name
		}
		if !found {
			add("initial-cluster: does not name this member %q", c.Name)
		}
		if _, err := c.Witnesses(members); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Witness && c.Join == "" && c.InitialWitnesses != "" && !slices.Contains(splitList(c.InitialWitnesses), c.Name) {
		add("witness: this member %q is not named in initial-witnesses %q; a founding witness is named there, and --witness alone is for one that joins", c.Name, c.InitialWitnesses)
	}
	return errors.Join(errs...)
}

// Witnesses parses InitialWitnesses against members (InitialCluster,
// parsed): the set of founding members that are witnesses. Each must be a
// member, and the data members must outnumber them: with as many witnesses
// as data members, losing half the data members would leave a quorum
// without a full copy of the data.
func (c *Config) Witnesses(members []Member) (map[string]bool, error) {
	names := splitList(c.InitialWitnesses)
	if len(names) == 0 {
		return nil, nil
	}
	if c.Join != "" {
		return nil, errors.New("initial-witnesses: founds a cluster, join joins one: a witness that joins says --witness")
	}
	known := map[string]bool{}
	for _, m := range members {
		known[m.Name] = true
	}
	out := map[string]bool{}
	for _, n := range names {
		if !known[n] {
			return nil, fmt.Errorf("initial-witnesses: %q is not a member of initial-cluster", n)
		}
		if out[n] {
			return nil, fmt.Errorf("initial-witnesses: %q listed twice", n)
		}
		out[n] = true
	}
	if data := len(members) - len(out); len(out) >= data {
		return nil, fmt.Errorf("initial-witnesses: %d witness(es) and %d data member(s): the data members must outnumber the witnesses "+
			"(two data members and one witness is the smallest such cluster)", len(out), data)
	}
	return out, nil
}

// IsWitness reports whether this member is, or is founded as, a witness.
func (c *Config) IsWitness() bool {
	return c.Witness || slices.Contains(splitList(c.InitialWitnesses), c.Name)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// ElectionTicks is the election timeout in heartbeat ticks.
func (c *Config) ElectionTicks() int {
	return int(c.ElectionTimeout / c.HeartbeatInterval)
}

// Size is a byte count that reads "1048576", "1024k", "1m" or "1MiB".
type Size int64

// ParseSize reads a byte count with an optional k/m/g (binary) suffix.
func ParseSize(s string) (Size, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "ib"), "b")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult, t = 1<<10, t[:n-1]
		case 'm':
			mult, t = 1<<20, t[:n-1]
		case 'g':
			mult, t = 1<<30, t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("invalid size %q (want e.g. 1048576, 1024k, 1m)", s)
	}
	return Size(v * mult), nil
}

func (s Size) String() string {
	switch {
	case s != 0 && s%(1<<20) == 0:
		return strconv.FormatInt(int64(s)>>20, 10) + "m"
	case s != 0 && s%(1<<10) == 0:
		return strconv.FormatInt(int64(s)>>10, 10) + "k"
	}
	return strconv.FormatInt(int64(s), 10)
}

// Set implements pflag.Value.
func (s *Size) Set(v string) error {
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	*s = n
	return nil
}

// Type implements pflag.Value.
func (s *Size) Type() string { return "size" }

// UnmarshalYAML accepts a number or a suffixed string. The error names the
// line: the decoder passes it on as it is, and several keys are sizes.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if err := s.Set(n.Value); err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	return nil
}

// checkSecurity: the TLS and authentication settings come in sets; half a
// set is a mistake to report, not a listener to leave in clear text.
func (c *Config) checkSecurity(add func(string, ...any)) {
	if (c.CertFile == "") != (c.KeyFile == "") {
		add("cert-file and key-file: give both or neither")
	}
	if c.CertFile == "" && (c.TrustedCAFile != "" || c.ClientCertAuth) {
		add("trusted-ca-file and client-cert-auth need cert-file and key-file: client certificates are checked only on TLS listeners")
	}
	if c.ClientCertAuth && c.TrustedCAFile == "" {
		add("client-cert-auth: needs trusted-ca-file, the CA that signs client certificates")
	}
	if set := btoi(c.PeerCertFile != "") + btoi(c.PeerKeyFile != "") + btoi(c.PeerTrustedCAFile != ""); set != 0 && set != 3 {
		add("peer-cert-file, peer-key-file and peer-trusted-ca-file: give all three (mutual TLS between members) or none")
	}
	switch c.TLSMinVersion {
	case "1.2", "1.3":
	default:
		add("tls-min-version %q: must be 1.2 or 1.3", c.TLSMinVersion)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Insecure lists, for the warning at start, the listeners bound beyond
// loopback that lack TLS or authentication: anyone who reaches them can read
// and write every item (or, for the peer port, speak for a member).
func (c *Config) Insecure() []string {
	var out []string
	exposed := func(addr string) bool {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return false
		}
		if host == "localhost" {
			return false
		}
		ip := net.ParseIP(host)
		return ip == nil || !ip.IsLoopback()
	}
	if exposed(c.MemcacheAddr) || exposed(c.HTTPAddr) {
		if c.CertFile == "" {
			out = append(out, "memcache and HTTP listeners without TLS (cert-file, key-file)")
		}
		if c.AuthFile == "" {
			out = append(out, "memcache and HTTP listeners without authentication (auth-file)")
		}
	}
	if exposed(c.PeerAddr) && c.PeerCertFile == "" {
		out = append(out, "peer listener without mutual TLS (peer-cert-file, peer-key-file, peer-trusted-ca-file)")
	}
	return out
}

// RedactURL is s with the password of its user information replaced by
// "xxxxx", for logs and errors: --join may carry Basic credentials. What
// does not parse as a URL loses everything up to its last '@' instead.
func RedactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	if i := strings.LastIndex(s, "@"); i >= 0 {
		return "xxxxx@" + s[i+1:]
	}
	return s
}
