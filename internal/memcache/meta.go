package memcache

import (
	"strconv"
	"time"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/mcproto"
	"github.com/kvd-project/kvd/internal/mcserver"
)

// The meta commands. Anything that changes an item is a log command
// (OpMetaStore, OpMetaDelete, OpMetaArith, OpMetaGet); an mg that changes
// nothing is a read at the connection's consistency, as get is, and becomes
// an OpMetaGet only when the item it read turns out to be stale with its
// recache token still to win. The counters move as memcached 1.6's do.

// metaGet answers mg.
func (ss *session) metaGet(req *mcproto.Request) *mcserver.Reply {
	m, e := &req.Meta, req.Echo
	touching := m.Has('T')
	if touching || m.Has('N') || m.Has('R') {
		return ss.metaGetLogged(req)
	}
	c, st := ss.c, ss.s.stats
	// What this node's reads noted must be counted first for h and l.
	it, ok, fail := ss.readMeta(req, m.Has('h') || m.Has('l'))
	if fail != nil {
		st.CmdGet.Add(1)
		return fail
	}
	key := req.Keys[0]
	if ok && it.Stale && !it.TokenSent {
		// Reading it hands out its recache token: a change, which one
		// request in the cluster wins.
		return ss.metaGetLogged(req)
	}
	st.CmdGet.Add(1)
	if !ok {
		st.GetMisses.Add(1)
		st.count(req.Op, ResultMiss, 1)
		return mcserver.Final(ss.menc.AppendMeta(nil, e, &mcproto.MetaReply{Status: mcproto.StatusNotFound}))
	}
	st.GetHits.Add(1)
	st.count(req.Op, ResultHit, 1)
	now := ss.s.kv.Now() // the cluster's time: a write this session just made is stamped after the request was read
	if !m.Has('u') && wantsAccessMark(&it, now) {
		ss.s.access.note(key, &it)
	}
	// The session's scratch reply: rendered here, on the reader goroutine,
	// it need not cost an allocation per mg.
	r := &ss.metaReply
	*r = metaItemReply(&it, now, m.Has('v'))
	r.TokenSent = it.TokenSent
	buf := ss.menc.AppendMeta(nil, keyAsStored(e, &it), r)
	r.Value = nil // the scratch must not keep a value alive
	return c.Budgeted(buf)
}

// metaGetLogged answers an mg that may change its item, through the log.
func (ss *session) metaGetLogged(req *mcproto.Request) *mcserver.Reply {
	// A copy: the render runs after the codec has reused req.
	meta := req.Meta
	m, st, e := &meta, ss.s.stats, req.Echo
	touching := m.Has('T')
	if m.Has('h') || m.Has('l') {
		// This node's noted reads go first, in the log, so that this mg
		// reports them (see accessMarks).
		ss.s.access.Send(ss.c.Context())
	}
	cmd := metaCommand(command.OpMetaGet, req.Keys[0], m)
	cmd.Meta |= flagOrder(e.Meta)
	if m.Has('v') || m.Has('s') {
		// s is the value's length: the result must carry the value.
		cmd.Meta |= command.MetaWantValue
	}
	if m.Has('u') {
		cmd.Meta |= command.MetaNoBump
	}
	want := m.Has('v')
	return ss.write(e, cmd, func(dst []byte, r command.Result) []byte {
		switch r.Status {
		case command.StatusHit:
			// memcached counts an mg with T as a touch, but only when it
			// finds the item: a miss is a get's.
			if touching {
				st.CmdTouch.Add(1)
				st.TouchHits.Add(1)
			} else {
				st.CmdGet.Add(1)
				st.GetHits.Add(1)
			}
			if r.Created {
				st.TotalItems.Add(1)
			}
			now := ss.s.kv.Now()
			mr := metaItemReply(&r.Item, now, want)
			mr.Won, mr.TokenSent, mr.Created = r.Won, r.HadToken, r.Created
			orderedTTL(&mr, m, &r, now)
			return ss.menc.AppendMeta(dst, keyAsStored(e, &r.Item), &mr)
		case command.StatusNotFound:
			st.CmdGet.Add(1)
			st.GetMisses.Add(1)
			return ss.menc.AppendMeta(dst, e, &mcproto.MetaReply{Status: mcproto.StatusNotFound})
		}
		return ss.unexpected(dst, e, r)
	})
}

// metaCommand is the log command of a meta request's flags that change
// an item: C, E, T, N, R, I and x, as their bits and fields. Each op's
// encoding keeps only the bits it takes (command.Encode), so that a flag
// memcached accepts and ignores on a command is ignored here too. (ms's T
// is its plain expiry: Exptime, whose bit ms does not take.)
func metaCommand(op command.Op, key []byte, m *mcproto.MetaFlags) *command.Command {
	cmd := &command.Command{Op: op, Key: key}
	set := func(flag byte, bit command.MetaFlags) bool {
		if m.Has(flag) {
			cmd.Meta |= bit
			return true
		}
		return false
	}
	if set('C', command.MetaHasCAS) {
		cmd.CAS = m.CompareCAS
	}
	if set('E', command.MetaHasNewCAS) {
		cmd.NewCAS = m.NewCAS
	}
	if set('T', command.MetaHasTTL) {
		cmd.Exptime = m.TTL
	}
	if set('N', command.MetaVivify) {
		cmd.Vivify = m.Vivify
	}
	if set('R', command.MetaRecache) {
		cmd.Recache = m.Recache
	}
	set('I', command.MetaInvalidate)
	set('x', command.MetaRemoveValue)
	return cmd
}

// flagOrder is the order of an mg's or ma's T, N and R, which memcached
// applies as it meets them.
func flagOrder(e *mcproto.MetaEcho) command.MetaFlags {
	var f command.MetaFlags
	t, n, r := e.FlagIndex('T'), e.FlagIndex('N'), e.FlagIndex('R')
	if t >= 0 && n > t {
		f |= command.MetaVivifyLast
	}
	if t >= 0 && r > t {
		f |= command.MetaRecacheAfterTTL
	}
	return f
}

// orderedTTL gives r what a t reports at each place among the flags of a
// request with T or N (see mcproto.MetaReply.Ordered).
func orderedTTL(r *mcproto.MetaReply, m *mcproto.MetaFlags, res *command.Result, now time.Time) {
	if !m.Has('T') && !m.Has('N') {
		return
	}
	r.Ordered = true
	r.TTLBefore = -1
	if !res.Created && res.PrevExpiresAt != 0 {
		r.TTLBefore = remainingTTL(&command.Item{ExpiresAt: res.PrevExpiresAt}, now)
	}
	r.TTLSet, r.TTLVivify = exptimeTTL(m.TTL, now), exptimeTTL(m.Vivify, now)
}

// exptimeTTL is what t reports for an item given exptime now: its
// expiry as the log will apply it (command.ExpiryOf), in seconds left.
func exptimeTTL(exptime int64, now time.Time) int64 {
	return remainingTTL(&command.Item{ExpiresAt: command.ExpiryOf(exptime, now.UnixNano())}, now)
}

// keyAsStored is e with the key to be returned as the item was stored:
// memcached returns a found item's key (mg's k, me) in base64 when an ms
// with b stored it, and as it is otherwise, whatever the request sent.
func keyAsStored(e mcproto.Echo, it *command.Item) mcproto.Echo {
	if e.Meta == nil || e.Meta.Base64 == it.KeyBinary {
		return e
	}
	m := *e.Meta
	m.Base64 = it.KeyBinary
	e.Meta = &m
	return e
}

// metaItemReply is an item as mg reports it at now.
func metaItemReply(it *command.Item, now time.Time, withValue bool) mcproto.MetaReply {
	r := mcproto.MetaReply{
		Status:     mcproto.StatusHit,
		Flags:      it.Flags,
		CAS:        it.CAS,
		TTL:        remainingTTL(it, now),
		LastAccess: sinceAccess(it, now),
		Fetched:    it.Fetched,
		Stale:      it.Stale,
		Size:       len(it.Value),
	}
	if withValue {
		r.Value = it.Value
		if r.Value == nil {
			r.Value = []byte{}
		}
	}
	return r
}

// remainingTTL is the seconds it has left, rounded up (an item set with
// T30 reports 30 at once, as memcached's whole-second clock does), or -1
// for none.
func remainingTTL(it *command.Item, now time.Time) int64 {
	if it.ExpiresAt == 0 {
		return -1
	}
	left := it.ExpiresAt - now.UnixNano()
	if left <= 0 {
		return 0
	}
	return (left + 1e9 - 1) / 1e9
}

// sinceAccess is the whole seconds since it was last read or written.
func sinceAccess(it *command.Item, now time.Time) int64 {
	at := it.AccessedAt
	if at == 0 {
		at = it.StoredAt
	}
	return max((now.UnixNano()-at)/1e9, 0)
}

// metaSet answers ms.
func (ss *session) metaSet(req *mcproto.Request) *mcserver.Reply {
	m, st, e := &req.Meta, ss.s.stats, req.Echo
	st.CmdSet.Add(1)
	mode := m.Mode
	if mode == 0 {
		mode = command.ModeSet
	}
	cmd := metaCommand(command.OpMetaStore, req.Keys[0], m)
	cmd.Value, cmd.Flags, cmd.Mode = req.Data, m.ClientFlags, mode
	if e.Meta.Base64 {
		cmd.Meta |= command.MetaKeyBinary
	}
	// A compare in set or replace mode is memcached's cas command.
	isCAS := m.Has('C') && (mode == command.ModeSet || mode == command.ModeReplace)
	return ss.write(e, cmd, func(dst []byte, r command.Result) []byte {
		reply := mcproto.MetaReply{}
		switch r.Status {
		case command.StatusStored:
			st.TotalItems.Add(1)
			if isCAS {
				st.CasHits.Add(1)
			}
			reply.Status, reply.CAS = mcproto.StatusStored, r.CAS
		case command.StatusNotStored, command.StatusTooLarge:
			reply.Status = mcproto.StatusNotStored
		case command.StatusExists:
			if isCAS {
				st.CasBadval.Add(1)
			}
			reply.Status = mcproto.StatusExists
		case command.StatusNotFound:
			st.CasMisses.Add(1)
			reply.Status = mcproto.StatusNotFound
		default:
			return ss.unexpected(dst, e, r)
		}
		return ss.menc.AppendMeta(dst, e, &reply)
	})
}

// metaDelete answers md.
func (ss *session) metaDelete(req *mcproto.Request) *mcserver.Reply {
	m, st, e := &req.Meta, ss.s.stats, req.Echo
	cmd := metaCommand(command.OpMetaDelete, req.Keys[0], m)
	cmd.Flags = m.ClientFlags // of the empty item x leaves, as newer memcached has it
	invalidate := m.Has('I')
	return ss.write(e, cmd, func(dst []byte, r command.Result) []byte {
		reply := mcproto.MetaReply{}
		switch r.Status {
		case command.StatusDeleted:
			if !invalidate { // marking stale is no delete to memcached
				st.DeleteHits.Add(1)
			}
			reply.Status = mcproto.StatusDeleted
		case command.StatusNotFound:
			st.DeleteMisses.Add(1)
			reply.Status = mcproto.StatusNotFound
		case command.StatusExists:
			st.DeleteMisses.Add(1) // memcached counts a CAS mismatch so
			reply.Status = mcproto.StatusExists
		case command.StatusNotStored:
			reply.Status = mcproto.StatusNotStored
		default:
			return ss.unexpected(dst, e, r)
		}
		return ss.menc.AppendMeta(dst, e, &reply)
	})
}

// metaArith answers ma.
func (ss *session) metaArith(req *mcproto.Request) *mcserver.Reply {
	// A copy: the render runs after the codec has reused req.
	meta := req.Meta
	m, st, e := &meta, ss.s.stats, req.Echo
	decr := m.Mode == 'D' || m.Mode == '-'
	hits, misses := &st.IncrHits, &st.IncrMisses
	cmd := metaCommand(command.OpMetaArith, req.Keys[0], m)
	cmd.Delta, cmd.Initial = m.Delta, m.Initial
	if decr {
		hits, misses = &st.DecrHits, &st.DecrMisses
		cmd.Meta |= command.MetaDecr
	}
	cmd.Meta |= flagOrder(e.Meta) &^ command.MetaRecacheAfterTTL // ma has no R
	return ss.write(e, cmd, func(dst []byte, r command.Result) []byte {
		reply := mcproto.MetaReply{}
		switch r.Status {
		case command.StatusValue:
			if r.Created {
				st.TotalItems.Add(1)
			} else {
				hits.Add(1)
			}
			if r.Grew {
				st.TotalItems.Add(1)
			}
			now := ss.s.kv.Now()
			// The item's CAS even when a T in the past expired it at once:
			// memcached shows it.
			reply = mcproto.MetaReply{Status: mcproto.StatusHit, Flags: r.Item.Flags, CAS: r.Item.CAS,
				TTL: remainingTTL(&r.Item, now), Value: strconv.AppendUint(nil, r.Value, 10), Created: r.Created}
			orderedTTL(&reply, m, &r, now)
		case command.StatusNotFound:
			misses.Add(1)
			reply.Status = mcproto.StatusNotFound
		case command.StatusExists:
			reply.Status = mcproto.StatusExists
		case command.StatusNotStored:
			reply.Status = mcproto.StatusNotStored
		case command.StatusNonNumeric:
			return ss.enc.AppendError(dst, e, mcproto.KindNonNumeric, "")
		default:
			return ss.unexpected(dst, e, r)
		}
		return ss.menc.AppendMeta(dst, e, &reply)
	})
}

// readMeta reads a meta request's key as get does (after the
// connection's own writes, at its consistency), after this node's read
// notes are applied when flush; a failure comes back as its reply,
// counted.
func (ss *session) readMeta(req *mcproto.Request, flush bool) (command.Item, bool, *mcserver.Reply) {
	c, st := ss.c, ss.s.stats
	c.WaitOwnWrites()
	if flush {
		ss.s.access.Flush(c.Context())
	}
	err := ss.s.kv.Barrier(c.Context(), ss.s.kv.Config().ReadConsistency)
	var it command.Item
	var ok bool
	if err == nil {
		it, ok, err = ss.s.kv.Get(req.Keys[0])
	}
	if err != nil {
		st.ServerErrors.Add(1)
		st.count(req.Op, ResultServerError, 1)
		return it, false, mcserver.Final(ss.errorReply(nil, req.Echo, err))
	}
	return it, ok, nil
}

// metaDebug answers me: an item's metadata, read like get.
func (ss *session) metaDebug(req *mcproto.Request) *mcserver.Reply {
	st, e := ss.s.stats, req.Echo
	st.CmdMeta.Add(1)
	it, ok, fail := ss.readMeta(req, true)
	if fail != nil {
		return fail
	}
	key := req.Keys[0]
	if !ok {
		st.count(req.Op, ResultMiss, 1)
		return mcserver.Final(ss.menc.AppendMeta(nil, e, &mcproto.MetaReply{Status: mcproto.StatusNotFound}))
	}
	st.count(req.Op, ResultHit, 1)
	r := metaItemReply(&it, ss.s.kv.Now(), false)
	r.Size = itemSize(key, &it)
	return mcserver.Final(ss.menc.AppendMeta(nil, keyAsStored(e, &it), &r))
}

// itemSize is what me reports as an item's size: memcached's item header
// (48 bytes on 64-bit), the key and its NUL, the value and its "\r\n",
// the CAS and, when non-zero, the flags. kvd stores items otherwise; this
// keeps the number comparable with memcached's.
func itemSize(key []byte, it *command.Item) int {
	n := 48 + len(key) + 1 + len(it.Value) + 2 + 8
	if it.Flags != 0 {
		n += 4
	}
	return n
}
