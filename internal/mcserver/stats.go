package mcserver

import (
	"cmp"
	"net"
	"slices"
	"strconv"
	"syscall"

	"github.com/kvd-project/kvd/internal/kv"
	"github.com/kvd-project/kvd/internal/mcproto"
)

// statsReply answers `stats [sub]`; ok is false when the reply is memcached's
// ERROR for a subcommand it does not know. Subcommands about memcached's slab
// allocator answer as a memcached with nothing stored would, so that tools
// polling them keep working.
func (c *conn) statsReply(args []string) (buf []byte, ok bool) {
	if len(args) == 0 {
		buf, _ = c.statsGeneral()
		return buf, true
	}
	switch args[0] {
	case "settings":
		return c.statsSettings(), true
	case "conns":
		return c.s.statsConns(), true
	case "raft":
		return c.s.statsRaft(), true
	case "reset":
		_, totals := c.statsGeneral()
		c.s.statsBase.Store(&totals)
		return append(buf, mcproto.ReplyReset...), true
	case "items":
		return mcproto.AppendEnd(buf), true
	case "cachedump":
		// memcached's argument checks, then its answer for an empty class.
		if len(args) < 3 {
			return mcproto.AppendClientError(buf, "bad command line"), true
		}
		id, ok1 := mcproto.ParseUint32([]byte(args[1]))
		_, ok2 := mcproto.ParseUint32([]byte(args[2]))
		if !ok1 || !ok2 {
			return mcproto.AppendClientError(buf, "bad command line format"), true
		}
		if id >= maxSlabClasses {
			return mcproto.AppendClientError(buf, "Illegal slab id"), true
		}
		return mcproto.AppendEnd(buf), true
	case "slabs":
		buf = mcproto.AppendStatUint(buf, "active_slabs", 0)
		buf = mcproto.AppendStatUint(buf, "total_malloced", 0)
		return mcproto.AppendEnd(buf), true
	case "sizes":
		buf = mcproto.AppendStat(buf, "sizes_status", "disabled")
		return mcproto.AppendEnd(buf), true
	case "detail":
		if len(args) > 1 {
			switch args[1] {
			case "dump":
				return mcproto.AppendEnd(buf), true
			case "on", "off":
				// kvd keeps no per-prefix detail; memcached says OK.
				return append(buf, mcproto.ReplyOK...), true
			}
		}
		return mcproto.AppendClientError(buf, "usage: stats detail on|off|dump"), true
	}
	return append(buf, mcproto.ReplyError...), false
}

// maxSlabClasses is memcached's MAX_NUMBER_OF_SLAB_CLASSES, the bound on
// `stats cachedump`'s class id.
const maxSlabClasses = 64

// statsConns lists the listener and every client connection in memcached's
// `stats conns` format, ordered by ID.
func (s *Server) statsConns() []byte {
	now := s.stats.sinceStart()
	type row struct {
		id          uint64
		addr, state string
		last        int64
	}
	var rows []row
	var listenAddr string
	s.mu.Lock()
	if s.ln != nil {
		listenAddr = "tcp:" + s.ln.Addr().String()
		rows = append(rows, row{id: listenerID(s.ln), addr: listenAddr, state: "conn_listening", last: s.lastAccept.Load()})
	}
	for c := range s.conns {
		st := c.state.Load()
		name := "conn_closing"
		if int(st) < len(stateNames) {
			name = stateNames[st]
		}
		rows = append(rows, row{id: c.id, addr: "tcp:" + c.addr, state: name, last: c.lastCmd.Load()})
	}
	s.mu.Unlock()
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(a.id, b.id) })

	var buf []byte
	for _, r := range rows {
		p := strconv.FormatUint(r.id, 10) + ":"
		buf = mcproto.AppendStat(buf, p+"addr", r.addr)
		if r.state != "conn_listening" && listenAddr != "" {
			buf = mcproto.AppendStat(buf, p+"listen_addr", listenAddr)
		}
		buf = mcproto.AppendStat(buf, p+"state", r.state)
		buf = mcproto.AppendStatUint(buf, p+"secs_since_last_cmd", uint64(max(now-r.last, 0)))
	}
	return mcproto.AppendEnd(buf)
}

// listenerID is the listening socket's descriptor, or 0 without one.
func listenerID(ln net.Listener) uint64 {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return 0
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	var fd uint64
	if raw.Control(func(f uintptr) { fd = uint64(f) }) != nil {
		return 0
	}
	return fd
}

// statsRaft is kvd's own `stats raft`: this member's raft state as the kv
// service reports it. Member IDs are hex, as in the logs and /v1/cluster.
func (s *Server) statsRaft() []byte {
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
			buf = mcproto.AppendStat(buf, k, v)
		}
	}
	u := func(k string, v uint64) { buf = mcproto.AppendStatUint(buf, k, v) }
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
	return mcproto.AppendEnd(buf)
}
