package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvd-project/kvd/internal/fsm"
	"github.com/kvd-project/kvd/internal/memcache"
)

// Roles a member's raft state can take, as replica.Status names them.
var raftRoles = []string{"leader", "follower", "candidate", "pre-candidate"}

// nodeCollector turns the node's own counters and status snapshots into
// metrics at scrape time.
type nodeCollector struct {
	src      Sources
	requests *requestCounts
	// pebble carries Pebble's cache counters across a store reopen.
	pebble monotonic

	// raft
	hasLeader, isLeader, ready, term, commit, applied, leaderChanges, pending *prometheus.Desc
	members, role                                                             *prometheus.Desc
	proposalsApplied, proposalsFailed                                         *prometheus.Desc
	leaseReads, readRounds, readRoundReads                                    *prometheus.Desc
	syncedEntries, syncedBatches, gatherHolds                                 *prometheus.Desc
	// raft log
	fsync, fsyncRunning, firstIndex, lastIndex, diskReads, tailEntries, tailBytes, segments, compactions *prometheus.Desc
	// fsm and storage
	fsmApplied, fsmDurable, diskUsage, items, valueBytes *prometheus.Desc
	compactionDebt, cacheHits, cacheMisses               *prometheus.Desc
	itemCacheLookups, itemCacheBytes                     *prometheus.Desc
	keyFilterSkips, keyFilterBytes                       *prometheus.Desc
	openFiles, openFilesLimit, fileHits, fileMisses      *prometheus.Desc
	// memcache
	conns, connsTotal, connsRejected, commands, commandDuration, readBytes, writtenBytes, serverErrors, stored *prometheus.Desc
	// all protocols
	requestsTotal *prometheus.Desc
}

func desc(subsystem, name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, subsystem, name), help, labels, nil)
}

func newNodeCollector(src Sources, requests *requestCounts) *nodeCollector {
	return &nodeCollector{
		src: src, requests: requests,

		hasLeader:        desc("raft", "has_leader", "1 if this node knows a raft leader, else 0."),
		isLeader:         desc("raft", "is_leader", "1 if this node is the raft leader, else 0."),
		ready:            desc("raft", "ready", "1 if this node is ready to serve (log replayed, leader known, caught up at startup), else 0."),
		term:             desc("raft", "term", "Current raft term."),
		commit:           desc("raft", "commit_index", "Highest log index known to be committed."),
		applied:          desc("raft", "applied_index", "Highest log index applied to the state machine (as of the last raft status)."),
		leaderChanges:    desc("raft", "leader_changes_total", "Leader changes this node has seen since it started."),
		pending:          desc("raft", "proposals_pending", "Proposals waiting for their entry to be applied."),
		proposalsApplied: desc("raft", "proposals_applied_total", "Proposals made on this node that were committed and applied."),
		proposalsFailed:  desc("raft", "proposals_failed_total", "Proposals made on this node that failed: refused (busy, no leader), timed out, or of unknown outcome after a leader change."),
		leaseReads:       desc("raft", "lease_read_batches_total", "Read batches in --read-consistency=lease mode on this node, by how they were answered: lease (from the leader's read lease) or read_index (a ReadIndex round).", "via"),
		readRounds:       desc("raft", "read_index_rounds_total", "ReadIndex rounds this node started for linearizable reads (one in flight at a time); kvd_raft_read_index_reads_total divided by it is the reads one round answers."),
		readRoundReads:   desc("raft", "read_index_reads_total", "Linearizable reads carried by the ReadIndex rounds this node started (a read retried after a lost round counts again)."),
		syncedEntries:    desc("raft", "log_synced_entries_total", "Entries written to the raft log in fsynced batches; divided by kvd_raft_log_synced_batches_total, the entries one fsync covers (group commit)."),
		syncedBatches:    desc("raft", "log_synced_batches_total", "Fsynced raft log batches that carried entries."),
		gatherHolds:      desc("raft", "group_commit_holds_total", "Batches the leader held open, for at most an fsync's time, for the writers it had just answered, so that one fsync covers them too."),
		members:          desc("raft", "members", "Members of the raft configuration, by kind (voter, learner).", "kind"),
		role:             desc("raft", "role", "1 for this node's current raft role, 0 for the others.", "role"),

		fsync:       desc("raft", "log_fsync_duration_seconds", "Fsynced raft log batch commits and the time spent in them (count and sum; no quantiles)."),
		firstIndex:  desc("raft", "log_first_index", "First index held in the raft log (past the last compaction)."),
		lastIndex:   desc("raft", "log_last_index", "Last index written to the raft log."),
		diskReads:   desc("raft", "log_entry_disk_reads_total", "Raft log entries read from disk because the in-memory tail cache did not hold them."),
		tailEntries: desc("raft", "log_tail_cache_entries", "Entries in the raft log's in-memory tail cache."),
		tailBytes:   desc("raft", "log_tail_cache_bytes", "Encoded bytes in the raft log's in-memory tail cache."),
		segments:    desc("raft", "log_segments", "Segment files holding the raft log (spares kept for reuse not counted)."),
		fsyncRunning: desc("raft", "log_fsync_in_progress_seconds", "How long the raft log's fsync under way has been running, 0 between fsyncs. "+
			"A disk that stopped answering shows here: kvd_raft_log_fsync_duration_seconds counts an fsync only once it returns."),
		compactions: desc("raft", "log_compactions_total", "Raft log compactions, each discarding entries the state store holds on disk and costing an fsync: about one per state store flush."),

		fsmApplied:       desc("fsm", "applied_index", "Last log index applied to the state store (visible to reads)."),
		fsmDurable:       desc("fsm", "durable_index", "Last log index the state store holds on disk (flushed); the raft log keeps the entries after it, which a restart replays."),
		diskUsage:        desc("storage", "disk_usage_bytes", "On-disk footprint of each store (state: the data, in Pebble; raft: the log's segment files, spares included).", "store"),
		items:            desc("storage", "items", "Items in the state store, including expired items the leader has not swept yet."),
		valueBytes:       desc("storage", "value_bytes", "Sum of the value sizes of the items in the state store."),
		compactionDebt:   desc("storage", "compaction_debt_bytes", "Pebble's estimate of the bytes its compactions are behind (store=state: the raft log is not kept in Pebble).", "store"),
		cacheHits:        desc("storage", "block_cache_hits_total", "Pebble block cache hits (store=state); the hit rate is hits / (hits + misses).", "store"),
		cacheMisses:      desc("storage", "block_cache_misses_total", "Pebble block cache misses (store=state).", "store"),
		itemCacheLookups: desc("storage", "item_cache_lookups_total", "Item cache lookups by reads and writes, by result (hit: answered without Pebble).", "result"),
		itemCacheBytes:   desc("storage", "item_cache_bytes", "Bytes held by the item cache in front of the state store (--item-cache-size)."),
		keyFilterSkips:   desc("storage", "key_filter_skips_total", "Reads of the state store (gets, and the old item a write replaces) that the in-memory key filter answered absent without Pebble."),
		keyFilterBytes:   desc("storage", "key_filter_bytes", "Bytes held by the in-memory key filter (0 while it is being built)."),
		openFiles:        desc("storage", "open_files", "Files the store holds open in Pebble's file cache, sstables and blob files (store=state).", "store"),
		openFilesLimit: desc("storage", "open_files_limit", "The bound on kvd_storage_open_files: what the open-file limit leaves after --max-connections and 1024 more, within 1000..10000. "+
			"At the bound, with kvd_storage_file_cache_misses_total climbing, reads are reopening files: raise the limit (LimitNOFILE).", "store"),
		fileHits:   desc("storage", "file_cache_hits_total", "Pebble file cache lookups that found the file open (store=state).", "store"),
		fileMisses: desc("storage", "file_cache_misses_total", "Pebble file cache lookups that had to open the file (store=state).", "store"),

		conns:         desc("memcache", "connections", "Open memcache client connections."),
		connsTotal:    desc("memcache", "connections_total", "Memcache connections accepted."),
		connsRejected: desc("memcache", "connections_rejected_total", "Memcache connections refused because max-connections was reached."),
		commands: desc("memcache", "commands_total", "Memcache commands answered, by command and result (hit, miss, stored, not_stored, exists, not_found, deleted, touched, ok, client_error, server_error, error). "+
			"A multi-key get or gat counts each key. Lines the parser rejects count as command \"unknown\".", "command", "result"),
		commandDuration: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "memcache", "command_duration_seconds"),
			"Time from parsing a memcache request to its reply being ready to write (including waiting for the write to be applied), by command.", []string{"command"}, nil),
		readBytes:    desc("memcache", "read_bytes_total", "Bytes read from memcache clients."),
		writtenBytes: desc("memcache", "written_bytes_total", "Bytes written to memcache clients."),
		serverErrors: desc("memcache", "server_errors_total", "SERVER_ERROR replies (no quorum, timeouts, busy, shutdown)."),
		stored:       desc("memcache", "items_stored_total", "Items stored through the memcache port (memcached's total_items)."),

		requestsTotal: desc("", "requests_total", "Key-value requests by protocol, command and result: every key-value request over http; "+
			"over memcache only the counts memcached's stats keep: get, delete, incr, decr and touch by hit and miss, cas by hit, miss and badval; "+
			"not set, add, replace, append or prepend: "+
			"kvd_memcache_commands_total counts every memcache command.", "protocol", "command", "result"),
	}
}

// Describe sends every descriptor.
func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.hasLeader, c.isLeader, c.ready, c.term, c.commit, c.applied, c.leaderChanges, c.pending, c.members, c.role,
		c.proposalsApplied, c.proposalsFailed, c.leaseReads, c.readRounds, c.readRoundReads,
		c.syncedEntries, c.syncedBatches, c.gatherHolds,
		c.fsync, c.fsyncRunning, c.firstIndex, c.lastIndex, c.diskReads, c.tailEntries, c.tailBytes, c.segments, c.compactions,
		c.fsmApplied, c.fsmDurable, c.diskUsage, c.items, c.valueBytes, c.compactionDebt, c.cacheHits, c.cacheMisses,
		c.itemCacheLookups, c.itemCacheBytes, c.keyFilterSkips, c.keyFilterBytes,
		c.openFiles, c.openFilesLimit, c.fileHits, c.fileMisses,
		c.conns, c.connsTotal, c.connsRejected, c.commands, c.commandDuration, c.readBytes, c.writtenBytes, c.serverErrors, c.stored,
		c.requestsTotal,
	} {
		if d == c.fsync && c.src.LogSync != nil {
			continue // the registered histogram owns the name
		}
		ch <- d
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Collect reads every source once.
func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}

	st := c.src.Raft.Status()
	gauge(c.hasLeader, b2f(st.Leader != 0))
	gauge(c.isLeader, b2f(st.Leader != 0 && st.Leader == st.ID))
	gauge(c.ready, b2f(st.Ready))
	gauge(c.term, float64(st.Term))
	gauge(c.commit, float64(st.Commit))
	gauge(c.applied, float64(st.Applied))
	counter(c.leaderChanges, float64(st.LeaderChanges))
	gauge(c.pending, float64(st.Pending))
	counter(c.proposalsApplied, float64(st.ProposalsApplied))
	counter(c.proposalsFailed, float64(st.ProposalsFailed))
	counter(c.leaseReads, float64(st.LeaseReads), "lease")
	counter(c.leaseReads, float64(st.LeaseFallbacks), "read_index")
	counter(c.readRounds, float64(st.ReadRounds))
	counter(c.readRoundReads, float64(st.ReadRoundReads))
	counter(c.syncedEntries, float64(st.SyncedEntries))
	counter(c.syncedBatches, float64(st.SyncedBatches))
	counter(c.gatherHolds, float64(st.GatherHolds))
	gauge(c.members, float64(len(st.Voters)), "voter")
	gauge(c.members, float64(len(st.Learners)), "learner")
	for _, r := range raftRoles {
		gauge(c.role, b2f(st.Role == r), r)
	}

	fs, pebble := c.storeStats()
	gauge(c.fsmApplied, float64(fs.Applied))
	gauge(c.fsmDurable, float64(fs.Durable))
	gauge(c.diskUsage, float64(fs.DiskBytes), "state")
	gauge(c.items, float64(max(fs.Items, 0)))
	gauge(c.valueBytes, float64(max(fs.Bytes, 0)))
	gauge(c.compactionDebt, float64(fs.CompactionDebt), "state")
	counter(c.cacheHits, pebble[pebbleBlockHits], "state")
	counter(c.cacheMisses, pebble[pebbleBlockMisses], "state")
	counter(c.itemCacheLookups, float64(fs.ItemCacheHits), "hit")
	counter(c.itemCacheLookups, float64(fs.ItemCacheMisses), "miss")
	gauge(c.itemCacheBytes, float64(fs.ItemCacheBytes))
	counter(c.keyFilterSkips, float64(fs.KeyFilterSkips))
	gauge(c.keyFilterBytes, float64(fs.KeyFilterBytes))
	gauge(c.openFiles, float64(fs.OpenFiles), "state")
	gauge(c.openFilesLimit, float64(fs.MaxOpenFiles), "state")
	counter(c.fileHits, pebble[pebbleFileHits], "state")
	counter(c.fileMisses, pebble[pebbleFileMisses], "state")

	if c.src.Log != nil {
		ls := c.src.Log.Stats()
		if c.src.LogSync == nil {
			// Without the per-fsync histogram, count and sum are all there is.
			ch <- prometheus.MustNewConstSummary(c.fsync, ls.SyncCount, ls.SyncDuration.Seconds(), nil)
		}
		gauge(c.firstIndex, float64(ls.FirstIndex))
		gauge(c.lastIndex, float64(ls.LastIndex))
		counter(c.diskReads, float64(ls.EntryDiskReads))
		gauge(c.tailEntries, float64(ls.TailCacheEntries))
		gauge(c.tailBytes, float64(ls.TailCacheBytes))
		gauge(c.diskUsage, float64(ls.DiskBytes), "raft")
		gauge(c.segments, float64(ls.Segments))
		gauge(c.fsyncRunning, ls.SyncInProgress.Seconds())
		counter(c.compactions, float64(ls.Compactions))
	}

	if m := c.src.Memcache; m != nil {
		c.collectMemcache(m, ch, gauge, counter)
	}
	c.requests.each(func(k requestKey, v uint64) {
		counter(c.requestsTotal, float64(v), k.protocol, k.command, k.result)
	})
}

// storeStats reads the state store and its Pebble counters made monotonic.
// Pebble's counters belong to the open store: a snapshot install reopens it
// and they restart at 0 mid-process. Two scrapes at once (an HA pair of
// Prometheus servers, a curl beside one) may fold their reads in either
// order: fold keeps the highest figure of a store and ignores one of an
// older store, so the order does not matter.
func (c *nodeCollector) storeStats() (fsm.Stats, [numPebbleCounters]float64) {
	fs := c.src.Store.Stats()
	return fs, c.pebble.fold(fs.StoreGen, [numPebbleCounters]int64{
		pebbleBlockHits: fs.BlockCacheHits, pebbleBlockMisses: fs.BlockCacheMisses,
		pebbleFileHits: fs.FileCacheHits, pebbleFileMisses: fs.FileCacheMisses,
	})
}

func (c *nodeCollector) collectMemcache(m *memcache.Stats, ch chan<- prometheus.Metric, gauge, counter func(*prometheus.Desc, float64, ...string)) {
	gauge(c.conns, float64(max(m.CurrConnections.Load(), 0)))
	counter(c.connsTotal, float64(m.TotalConnections.Load()))
	counter(c.connsRejected, float64(m.RejectedConnections.Load()))
	for _, cs := range m.Commands() {
		for r, v := range cs.Results {
			// Results a command can give are exposed from the start, so that
			// rate() sees their first increment; others only if they occur.
			if cs.Possible[r] || v > 0 {
				counter(c.commands, float64(v), cs.Command, memcache.ResultName(r))
			}
		}
		buckets := make(map[float64]uint64, len(cs.Buckets))
		for i, b := range memcache.LatencyBounds {
			buckets[b.Seconds()] = cs.Buckets[i]
		}
		ch <- prometheus.MustNewConstHistogram(c.commandDuration, cs.Count, cs.Sum.Seconds(), buckets, cs.Command)
	}
	counter(c.readBytes, float64(m.BytesRead.Load()))
	counter(c.writtenBytes, float64(m.BytesWritten.Load()))
	counter(c.serverErrors, float64(m.ServerErrors.Load()))
	counter(c.stored, float64(m.TotalItems.Load()))
	// memcached's own hit/miss pairs; each counter is read once, never
	// derived by subtraction, so every series stays monotonic. (get_expired
	// is part of get_misses in memcached, so it gets no series of its own.)
	for _, r := range []struct {
		command, result string
		v               uint64
	}{
		{"get", "hit", m.GetHits.Load()}, {"get", "miss", m.GetMisses.Load()},
		{"delete", "hit", m.DeleteHits.Load()}, {"delete", "miss", m.DeleteMisses.Load()},
		{"incr", "hit", m.IncrHits.Load()}, {"incr", "miss", m.IncrMisses.Load()},
		{"decr", "hit", m.DecrHits.Load()}, {"decr", "miss", m.DecrMisses.Load()},
		{"cas", "hit", m.CasHits.Load()}, {"cas", "miss", m.CasMisses.Load()}, {"cas", "badval", m.CasBadval.Load()},
		{"touch", "hit", m.TouchHits.Load()}, {"touch", "miss", m.TouchMisses.Load()},
	} {
		counter(c.requestsTotal, float64(r.v), "memcache", r.command, r.result)
	}
}

// The Pebble counters monotonic keeps continuous.
const (
	pebbleBlockHits = iota
	pebbleBlockMisses
	pebbleFileHits
	pebbleFileMisses
	numPebbleCounters
)

// monotonic turns counters that restart at 0 when the state store is
// reopened (a snapshot install closes Pebble and opens the received store,
// with a new block cache and file cache) into counters that only go up, as
// Prometheus requires within one process. The store's generation
// (fsm.Stats.StoreGen) tells a reopen: what had been counted before it is
// kept as a base. A read of the same store lower than the last one is an
// older figure served late (Stats answers with the last figures read while
// an install holds the store) and is not taken for a reopen, nor is a read
// of no store (generation 0). Increments between the last scrape and the
// reopen are lost; the series never goes down.
type monotonic struct {
	mu         sync.Mutex
	gen        uint64
	last, base [numPebbleCounters]int64
}

// fold takes in raw, read from store generation gen, and returns the
// monotonic counters.
func (m *monotonic) fold(gen uint64, raw [numPebbleCounters]int64) (out [numPebbleCounters]float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case gen == 0 || gen < m.gen:
		// No store read, or a figure of a store since replaced read late.
	case gen != m.gen:
		if m.gen != 0 {
			for i := range m.base {
				m.base[i] += m.last[i]
			}
		}
		m.gen = gen
		for i, v := range raw {
			m.last[i] = max(v, 0)
		}
	default:
		for i, v := range raw {
			m.last[i] = max(m.last[i], v)
		}
	}
	for i := range out {
		out[i] = float64(m.base[i] + m.last[i])
	}
	return out
}
