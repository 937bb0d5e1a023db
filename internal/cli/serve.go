package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvd-project/kvd/internal/config"
	"github.com/kvd-project/kvd/internal/kv"
	"github.com/kvd-project/kvd/internal/node"
	"github.com/kvd-project/kvd/internal/timerslack"
)

func newServeCmd() *cobra.Command {
	cfg := config.Default()
	var cfgFile string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a kvd node (memcache + HTTP listeners over a Raft log)",
		Long: `Run a kvd node. With no flags: a single-node group named after the host,
data in ./kvd-data, memcache on 127.0.0.1:11211, HTTP on 127.0.0.1:11280.

Every write is appended to the Raft log and fsynced before it is
acknowledged. Flags override the --config file, whose keys are the flag
names (e.g. "max-item-size: 2m").

Each flag can also come from the environment as KVD_ and its name in
capitals, '-' as '_' (KVD_AUTH_FILE, KVD_PEER_CERT_FILE). Precedence: the
command line, then the environment, then the --config file, then the
defaults.

Security: by default kvd listens on loopback and trusts whoever reaches
it; bound elsewhere without TLS or --auth-file it logs an INSECURE warning.
--cert-file/--key-file make the memcache and HTTP ports TLS-only
(--trusted-ca-file and --client-cert-auth for client certificates);
--peer-cert-file/--peer-key-file/--peer-trusted-ca-file turn on mutual TLS
between members, each certificate naming its member (DNS SAN or CN);
--auth-file (htpasswd, bcrypt) makes every memcache connection log in
(binary SASL PLAIN, or memcached's text "set" exchange) and the HTTP API
ask for Basic credentials. Certificates and the auth file are re-read on
change and at SIGHUP. "kvd certs" makes the files; the README's Security
section walks through a whole cluster.`,
		Example: `  kvd serve
  kvd serve --data-dir /var/lib/kvd --memcache-addr 0.0.0.0:11211
  kvd serve --config /etc/kvd/kvd.yaml
  # a secured member (files from: kvd certs cluster --out certs --members n1,n2,n3)
  kvd serve --name n1 --memcache-addr 0.0.0.0:11211 --http-addr 0.0.0.0:11280 --peer-addr 0.0.0.0:11290 \
    --initial-cluster n1=n1.example.net:11290,n2=n2.example.net:11290,n3=n3.example.net:11290 \
    --cert-file certs/n1.crt --key-file certs/n1.key \
    --peer-cert-file certs/n1.crt --peer-key-file certs/n1.key --peer-trusted-ca-file certs/ca.crt \
    --auth-file certs/kvd.htpasswd`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfgFile != "" {
				// The file goes under the flags: reload it into defaults, then
				// re-apply every flag the user set explicitly.
				fileCfg := config.Default()
				if err := fileCfg.LoadFile(cfgFile); err != nil {
					return err
				}
				onFile := bindFlags(pflag.NewFlagSet("", pflag.ContinueOnError), &fileCfg)
				var replayErr error
				cmd.Flags().Visit(func(f *pflag.Flag) {
					if f.Name == "config" || replayErr != nil {
						return
					}
					replayErr = onFile.Set(f.Name, f.Value.String())
				})
				if replayErr != nil {
					return replayErr
				}
				cfg = fileCfg
			}
			// Validate before building the logger, so that a bad
			// --log-level is reported with every other problem, not alone.
			if err := cfg.Validate(); err != nil {
				return err
			}
			logger, err := newLogger(cfg.LogLevel)
			if err != nil {
				return err
			}
			// Before any file or listener is open: it may execute kvd again.
			timerslack.Ensure(cmd.Context(), cfg.TimerSlack, logger)
			// A signal during start-up (a join still waiting for its
			// answer) stops it, rather than wait for the start to end.
			n, err := node.StartContext(cmd.Context(), cfg, logger)
			if err != nil {
				if cmd.Context().Err() != nil {
					// Told to stop (SIGTERM) before it was up: a stop like
					// one at any other time, exit status 0, which systemd
					// does not count as the unit failing.
					logger.Info("stopped during start-up", "err", err)
					return nil
				}
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "kvd %s serving memcache on %s, http on %s (data in %s)\n",
				cfg.Name, n.MemcacheAddr(), n.HTTPAddr(), cfg.DataDir)
			reloadOnHangup(cmd.Context(), n, logger)
			return serveExit(n.Run(cmd.Context()))
		},
	}
	cmd.Flags().StringVar(&cfgFile, "config", "", "YAML config file; its keys are these flag names")
	cmd.Flags().AddFlagSet(bindFlags(pflag.NewFlagSet("serve", pflag.ContinueOnError), &cfg))
	return cmd
}

// reloadOnHangup re-reads certificates and credentials at SIGHUP, as
// memcached's refresh_certs does (they are also re-read when they change).
// Without it SIGHUP would end the process, its default action.
func reloadOnHangup(ctx context.Context, n *node.Node, logger *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := n.Reload(); err != nil {
					logger.Error("SIGHUP: reload failed; the current certificates and credentials stay", "err", err)
				}
			}
		}
	}()
}

// ExitRemoved is kvd serve's exit status when its member was removed from
// the cluster. Started again on the same data dir it would only stop again,
// so a supervisor must not restart it: deploy/systemd/kvd.service names
// this status in RestartPreventExitStatus.
const ExitRemoved = 4

// removedError carries ExitRemoved to main.
type removedError struct{ error }

func (e *removedError) Unwrap() error { return e.error }
func (e *removedError) ExitCode() int { return ExitRemoved }

// serveExit gives the error that ends kvd serve its exit status.
func serveExit(err error) error {
	if errors.Is(err, kv.ErrRemoved) {
		return &removedError{err}
	}
	return err
}

// bindFlags binds every config field to a flag of fs, so the flags, the
// config file keys and config.Config stay one list.
func bindFlags(fs *pflag.FlagSet, c *config.Config) *pflag.FlagSet {
	fs.StringVar(&c.Name, "name", c.Name, "member name (in --initial-cluster); no '/', ',', '=', spaces or control characters")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for the raft log and the data")
	fs.StringVar(&c.MemcacheAddr, "memcache-addr", c.MemcacheAddr, "memcached protocol listener (TCP)")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP listener: API /v1/kv, /v1/cluster, /metrics, /healthz, /readyz, console at /")
	fs.StringVar(&c.PeerAddr, "peer-addr", c.PeerAddr, "raft peer listener")
	fs.StringVar(&c.InitialCluster, "initial-cluster", c.InitialCluster, "founding members name=host:port,…, names as for --name (default: this member alone)")
	fs.StringVar(&c.Join, "join", c.Join, "join a running cluster through a member's HTTP address (http://host:11280) instead of founding one")
	fs.StringVar(&c.InitialWitnesses, "initial-witnesses", c.InitialWitnesses, "names in --initial-cluster that are witnesses: voters that hold no data (give every founding member the same list)")
	fs.BoolVar(&c.ForceNewCluster, "force-new-cluster", c.ForceNewCluster, "recover from a lost quorum: make this existing member the only voter of its cluster, keeping its log (one-time; may lose writes only the lost members held; see docs/backup.md)")
	fs.BoolVar(&c.Witness, "witness", c.Witness, "run as a witness: vote, hold no data, serve no data requests (a founding witness is named in --initial-witnesses; this is for one that joins)")
	fs.StringVar(&c.AdvertisePeerAddr, "advertise-peer-addr", c.AdvertisePeerAddr, "peer address other members dial (default: this member's --initial-cluster entry, else --peer-addr; wildcard host → host name)")
	fs.StringVar(&c.AdvertiseHTTPAddr, "advertise-http-addr", c.AdvertiseHTTPAddr, "HTTP address published to other members and the console (default: the bound --http-addr, wildcard host → host name)")
	fs.StringVar(&c.AdvertiseMemcacheAddr, "advertise-memcache-addr", c.AdvertiseMemcacheAddr, "memcache address published in the member table (default: the bound --memcache-addr, wildcard host → host name)")
	fs.Var(&c.MaxItemSize, "max-item-size", "largest value accepted (bytes; k/m suffixes)")
	fs.IntVar(&c.MaxConnections, "max-connections", c.MaxConnections, "maximum concurrent memcache connections")
	fs.IntVar(&c.MaxPending, "max-pending", c.MaxPending, "writes waiting for the raft log at once; more are refused as busy")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", c.RequestTimeout, "bound on every request; without quorum requests fail after it")
	fs.StringVar(&c.ReadConsistency, "read-consistency", c.ReadConsistency, "default reads: linearizable, lease or local (may be stale)")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", c.HeartbeatInterval, "raft heartbeat interval (one tick)")
	fs.DurationVar(&c.ElectionTimeout, "election-timeout", c.ElectionTimeout, "raft election timeout: a multiple of --heartbeat-interval, at least 3×")
	fs.Uint64Var(&c.SnapshotCount, "snapshot-count", c.SnapshotCount, "applied entries between raft log compactions (or 16 MiB of entry data, if that comes first)")
	fs.Uint64Var(&c.SnapshotCatchupEntries, "snapshot-catchup-entries", c.SnapshotCatchupEntries, "entries kept behind the applied index at a compaction (at most 16 MiB of them); a follower further behind gets a snapshot")
	fs.Var(&c.MinFreeDisk, "min-free-disk", "refuse writes while the data dir's filesystem has less free space (bytes; k/m/g suffixes; 0: off)")
	fs.Var(&c.CacheSize, "cache-size", "Pebble block cache for the data, beside its 64 MiB of memtables (bytes; k/m/g suffixes)")
	fs.Var(&c.ItemCacheSize, "item-cache-size", "in-memory cache of hot items in front of Pebble (bytes; k/m/g suffixes; 0: off)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "bound on the graceful drain at SIGTERM, and again on stopping raft and closing the stores after it")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.DurationVar(&c.TimerSlack, "timer-slack", c.TimerSlack, "kernel timer slack for every kvd thread (Linux; 0: keep the inherited one); set by executing kvd again at start")
	fs.BoolVar(&c.EnablePprof, "enable-pprof", c.EnablePprof, "serve Go's profiler at /debug/pprof/ on the HTTP listener")
	fs.StringVar(&c.CertFile, "cert-file", c.CertFile, "TLS certificate (PEM) for the memcache and HTTP listeners, which then speak TLS only; re-read on SIGHUP or change")
	fs.StringVar(&c.KeyFile, "key-file", c.KeyFile, "TLS private key (PEM) for --cert-file")
	fs.StringVar(&c.TrustedCAFile, "trusted-ca-file", c.TrustedCAFile, "CA (PEM) that signs client certificates; a client certificate is verified against it when given")
	fs.BoolVar(&c.ClientCertAuth, "client-cert-auth", c.ClientCertAuth, "require a client certificate signed by --trusted-ca-file on the memcache and HTTP listeners")
	fs.StringVar(&c.TLSMinVersion, "tls-min-version", c.TLSMinVersion, "oldest TLS version accepted: 1.2 or 1.3")
	fs.StringVar(&c.PeerCertFile, "peer-cert-file", c.PeerCertFile, "this member's certificate (PEM) for mutual TLS between members; it must name the member (DNS SAN or CN)")
	fs.StringVar(&c.PeerKeyFile, "peer-key-file", c.PeerKeyFile, "private key (PEM) for --peer-cert-file")
	fs.StringVar(&c.PeerTrustedCAFile, "peer-trusted-ca-file", c.PeerTrustedCAFile, "CA (PEM) that signs every member's peer certificate; with it, plaintext peers are refused")
	fs.StringVar(&c.AuthFile, "auth-file", c.AuthFile, "htpasswd file of bcrypt hashes (htpasswd -B): memcache connections must authenticate, HTTP data and admin APIs need Basic credentials")
	return fs
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, fmt.Errorf("log-level %q: %w", level, err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}
