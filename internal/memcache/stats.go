package memcache

import (
	"os"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/kvd-project/kvd/internal/kv"
	"github.com/kvd-project/kvd/internal/mcproto"
	"github.com/kvd-project/kvd/internal/version"
)

// statsReply answers `stats [sub]`; ok is false when the reply is memcached's
// ERROR for a subcommand it does not know. Subcommands about memcached's slab
// allocator answer as a memcached with nothing stored would, so that tools
// polling them keep working.
func (ss *session) statsReply(e mcproto.Echo, args []string) (buf []byte, ok bool) {
	enc := ss.enc
	if len(args) == 0 {
		buf, _ = ss.statsGeneral(e)
		return buf, true
	}
	switch args[0] {
	case "settings":
		return ss.statsSettings(e), true
	case "conns":
		return ss.statsConns(e), true
	case "raft":
		return ss.statsRaft(e), true
	case "reset":
		_, totals := ss.statsGeneral(e)
		ss.s.statsBase.Store(&totals)
		return enc.AppendStatus(buf, e, mcproto.StatusReset, 0), true
	case "items":
		return enc.AppendEnd(buf, e), true
	case "cachedump":
		// memcached's argument checks, then its answer for an empty class.
		if len(args) < 3 {
			return enc.AppendError(buf, e, mcproto.KindClient, "bad command line"), true
		}
		id, ok1 := mcproto.ParseUint32([]byte(args[1]))
		_, ok2 := mcproto.ParseUint32([]byte(args[2]))
		if !ok1 || !ok2 {
			return enc.AppendError(buf, e, mcproto.KindClient, "bad command line format"), true
		}
		if id >= maxSlabClasses {
			return enc.AppendError(buf, e, mcproto.KindClient, "Illegal slab id"), true
		}
		return enc.AppendEnd(buf, e), true
	case "slabs":
		buf = enc.AppendStatUint(buf, e, "active_slabs", 0)
		buf = enc.AppendStatUint(buf, e, "total_malloced", 0)
		return enc.AppendEnd(buf, e), true
	case "sizes":
		buf = enc.AppendStat(buf, e, "sizes_status", "disabled")
		return enc.AppendEnd(buf, e), true
	case "detail":
		if len(args) > 1 {
			switch args[1] {
			case "dump":
				return enc.AppendEnd(buf, e), true
			case "on", "off":
				// kvd keeps no per-prefix detail; memcached says OK.
				return enc.AppendStatus(buf, e, mcproto.StatusOK, 0), true
			}
		}
		return enc.AppendError(buf, e, mcproto.KindClient, "usage: stats detail on|off|dump"), true
	}
	return enc.AppendError(buf, e, mcproto.KindError, ""), false
}

// maxSlabClasses is memcached's MAX_NUMBER_OF_SLAB_CLASSES, the bound on
// `stats cachedump`'s class id.
const maxSlabClasses = 64

// statsConns lists the listener and every client connection in memcached's
// `stats conns` format, ordered by ID.
func (ss *session) statsConns(e mcproto.Echo) []byte {
	enc := ss.enc
	now := ss.s.stats.SinceStart()
	rows, listenAddr := ss.c.Server().Conns()
	var buf []byte
	for _, r := range rows {
		p := strconv.FormatUint(r.ID, 10) + ":"
		buf = enc.AppendStat(buf, e, p+"addr", r.Addr)
		if r.State != "conn_listening" && listenAddr != "" {
			buf = enc.AppendStat(buf, e, p+"listen_addr", listenAddr)
		}
		buf = enc.AppendStat(buf, e, p+"state", r.State)
		buf = enc.AppendStatUint(buf, e, p+"secs_since_last_cmd", uint64(max(now-r.LastCmd, 0)))
	}
	return enc.AppendEnd(buf, e)
}

// statsRaft is kvd's own `stats raft`: this member's raft state as the kv
// service reports it. Member IDs are hex, as in the logs and /v1/cluster.
func (ss *session) statsRaft(e mcproto.Echo) []byte {
	s, enc := ss.s, ss.enc
	st := s.kv.Status()
	hex := func(id kv.NodeID) string { return strconv.FormatUint(uint64(id), 16) }
	name := func(id kv.NodeID) string {
		if id == st.ID && s.cfg.Name != "" {
			return s.cfg.Name
		}
		if s.cfg.MemberName != nil {
			return s.cfg.MemberName(id)
		}
		return ""
	}
	var buf []byte
	str := func(k, v string) {
		if v != "" {
			buf = enc.AppendStat(buf, e, k, v)
		}
	}
	u := func(k string, v uint64) { buf = enc.AppendStatUint(buf, e, k, v) }
	str("name", name(st.ID))
	str("id", hex(st.ID))
	str("role", st.Role)
	if st.Leader != 0 {
		str("leader", hex(st.Leader))
		str("leader_name", name(st.Leader))
	} else {
		str("leader", "none")
	}
	ready := uint64(0)
	if st.Ready {
		ready = 1
	}
	u("ready", ready)
	u("term", st.Term)
	u("commit_index", st.Commit)
	u("applied_index", st.Applied)
	u("leader_changes", st.LeaderChanges)
	u("proposals_pending", uint64(max(st.Pending, 0)))
	u("voters", uint64(len(st.Voters)))
	u("learners", uint64(len(st.Learners)))
	members := func(ids []kv.NodeID, kind string) {
		ids = slices.Clone(ids)
		slices.Sort(ids)
		for _, id := range ids {
			p := "member:" + hex(id) + ":"
			str(p+"kind", kind)
			str(p+"name", name(id))
		}
	}
	members(st.Voters, "voter")
	members(st.Learners, "learner")
	return enc.AppendEnd(buf, e)
}

// statsGeneral answers `stats`. Running totals (t) are shown since the
// last `stats reset`, as memcached's stats_reset zeroes them; current state
// (u: connections, items, bytes) is not reset. It also returns the totals
// as read, for `stats reset` to keep.
//
// Every field memcached 1.6.18 prints comes in memcached's order (a test
// compares the two key sets), so that monitoring tools and client suites
// that read them find them; kvd's own fields follow. Where kvd has no such
// thing (a slab allocator, an LRU, a hash table, a memory limit) the field
// is an honest 0, and so are the ones for features kvd does not have yet
// (authentication).
func (ss *session) statsGeneral(e mcproto.Echo) ([]byte, map[string]uint64) {
	s, enc := ss.s, ss.enc
	st := s.stats
	status := s.kv.Status()
	now := time.Now()
	var buf []byte
	u := func(name string, v uint64) { buf = enc.AppendStatUint(buf, e, name, v) }
	str := func(name, v string) { buf = enc.AppendStat(buf, e, name, v) }
	zero := func(names ...string) {
		for _, n := range names {
			u(n, 0)
		}
	}
	var base map[string]uint64
	if p := s.statsBase.Load(); p != nil {
		base = *p
	}
	totals := make(map[string]uint64, 32)
	t := func(name string, v uint64) {
		totals[name] = v
		u(name, v-base[name])
	}
	curr := uint64(max(st.CurrConnections.Load(), 0))
	u("pid", uint64(os.Getpid()))
	u("uptime", uint64(now.Sub(st.Started)/time.Second))
	u("time", uint64(now.Unix()))
	str("version", version.Memcached)
	str("libevent", "none")
	u("pointer_size", strconv.IntSize)
	appendRusage(str)
	u("max_connections", uint64(s.cfg.MaxConnections))
	u("curr_connections", curr)
	t("total_connections", st.TotalConnections.Load())
	t("rejected_connections", st.RejectedConnections.Load())
	// The client connections and the listener, as memcached counts its
	// connection structures; kvd has no pooled response objects or read
	// buffers, and reserves no descriptors.
	u("connection_structures", curr+1)
	zero("response_obj_oom", "response_obj_count", "response_obj_bytes",
		"read_buf_count", "read_buf_bytes", "read_buf_bytes_free", "read_buf_oom", "reserved_fds")
	t("cmd_get", st.CmdGet.Load())
	t("cmd_set", st.CmdSet.Load())
	t("cmd_flush", st.CmdFlush.Load())
	t("cmd_touch", st.CmdTouch.Load())
	t("cmd_meta", st.CmdMeta.Load())
	t("get_hits", st.GetHits.Load())
	t("get_misses", st.GetMisses.Load())
	// An expired or flushed item is a miss like any other here: the store
	// hides it without saying why.
	zero("get_expired", "get_flushed")
	t("delete_misses", st.DeleteMisses.Load())
	t("delete_hits", st.DeleteHits.Load())
	t("incr_misses", st.IncrMisses.Load())
	t("incr_hits", st.IncrHits.Load())
	t("decr_misses", st.DecrMisses.Load())
	t("decr_hits", st.DecrHits.Load())
	t("cas_misses", st.CasMisses.Load())
	t("cas_hits", st.CasHits.Load())
	t("cas_badval", st.CasBadval.Load())
	t("touch_hits", st.TouchHits.Load())
	t("touch_misses", st.TouchMisses.Load())
	t("store_too_large", st.StoreTooLarge.Load())
	t("store_no_memory", st.StoreNoMemory.Load())
	t("auth_cmds", st.AuthCmds.Load())
	t("auth_errors", st.AuthErrors.Load())
	t("bytes_read", st.BytesRead.Load())
	t("bytes_written", st.BytesWritten.Load())
	// No memory limit: kvd is bounded by its disk (disk_free_bytes below).
	u("limit_maxbytes", 0)
	u("accepting_conns", 1)
	// kvd never stops listening: past --max-connections it refuses
	// (rejected_connections).
	zero("listen_disabled_num", "time_in_listen_disabled_us")
	u("threads", uint64(runtime.GOMAXPROCS(0)))
	zero("conn_yields", "hash_power_level", "hash_bytes", "hash_is_expanding",
		"slab_reassign_rescues", "slab_reassign_chunk_rescues", "slab_reassign_evictions_nomem",
		"slab_reassign_inline_reclaim", "slab_reassign_busy_items", "slab_reassign_busy_deletes",
		"slab_reassign_running", "slabs_moved", "lru_crawler_running", "lru_crawler_starts",
		"lru_maintainer_juggles", "malloc_fails", "log_worker_dropped", "log_worker_written",
		"log_watcher_skipped", "log_watcher_sent", "log_watchers", "unexpected_napi_ids",
		"round_robin_fallback")
	store := s.kv.StoreStats()
	u("bytes", uint64(max(store.Bytes, 0)))
	u("curr_items", uint64(max(store.Items, 0)))
	t("total_items", st.TotalItems.Load())
	u("slab_global_page_pool", 0)
	zero("expired_unfetched", "evicted_unfetched", "evicted_active")
	u("evictions", 0) // kvd never evicts: a full store is an error, not a silent drop
	zero("reclaimed", "crawler_reclaimed", "crawler_items_checked", "lrutail_reflocked",
		"moves_to_cold", "moves_to_warm", "moves_within_lru", "direct_reclaims", "lru_bumps_dropped")
	// kvd's own.
	t("server_errors", st.ServerErrors.Load())
	if g := s.kv.Space(); g != nil {
		// Free space of the data dir, and 1 while writes are refused for
		// lack of it (--min-free-disk).
		u("disk_free_bytes", g.Free())
		low := uint64(0)
		if g.Low() {
			low = 1
		}
		u("disk_full", low)
	}
	u("raft_term", status.Term)
	u("raft_commit_index", status.Commit)
	u("raft_applied_index", status.Applied)
	str("raft_role", status.Role)
	return enc.AppendEnd(buf, e), totals
}

// statsSettings answers `stats settings`: the settings kvd has.
func (ss *session) statsSettings(e mcproto.Echo) []byte {
	enc, cfg := ss.enc, ss.s.cfg
	var buf []byte
	buf = enc.AppendStatUint(buf, e, "maxconns", uint64(cfg.MaxConnections))
	buf = enc.AppendStatUint(buf, e, "item_size_max", uint64(cfg.MaxItemSize))
	buf = enc.AppendStat(buf, e, "cas_enabled", "yes")
	buf = enc.AppendStat(buf, e, "evictions", "off")
	buf = enc.AppendStatUint(buf, e, "udpport", 0)
	return enc.AppendEnd(buf, e)
}
