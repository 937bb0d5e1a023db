package mcserver

import (
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/kv"
	"github.com/kvd-project/kvd/internal/mcproto"
	"github.com/kvd-project/kvd/internal/version"
)

var storageOps = map[mcproto.Command]command.Op{
	mcproto.CmdSet: command.OpSet, mcproto.CmdAdd: command.OpAdd, mcproto.CmdReplace: command.OpReplace,
	mcproto.CmdAppend: command.OpAppend, mcproto.CmdPrepend: command.OpPrepend, mcproto.CmdCas: command.OpCAS,
}

// handle turns one request into its reply (final, or pending on writes).
func (c *conn) handle(req *mcproto.Request) *reply {
	st := c.s.stats
	switch req.Command {
	case mcproto.CmdGet, mcproto.CmdGets:
		return c.get(req)
	case mcproto.CmdGat, mcproto.CmdGats:
		return c.gat(req)
	case mcproto.CmdSet, mcproto.CmdAdd, mcproto.CmdReplace, mcproto.CmdAppend, mcproto.CmdPrepend, mcproto.CmdCas:
		st.CmdSet.Add(1)
		cmd := &command.Command{Op: storageOps[req.Command], Key: req.Keys[0], Value: req.Data,
			Flags: req.Flags, Exptime: req.Exptime, CAS: req.CAS}
		isCAS := req.Command == mcproto.CmdCas
		return c.write(req, cmd, func(dst []byte, r command.Result) []byte {
			switch r.Status {
			case command.StatusStored:
				st.TotalItems.Add(1)
				if isCAS {
					st.CasHits.Add(1)
				}
				return append(dst, mcproto.ReplyStored...)
			case command.StatusNotStored:
				return append(dst, mcproto.ReplyNotStored...)
			case command.StatusExists:
				st.CasBadval.Add(1)
				return append(dst, mcproto.ReplyExists...)
			case command.StatusNotFound:
				st.CasMisses.Add(1)
				return append(dst, mcproto.ReplyNotFound...)
			case command.StatusTooLarge:
				// An append or prepend whose result would exceed the item
				// size limit: memcached 1.6 fails to allocate the combined
				// item and answers NOT_STORED, keeping the old value.
				return append(dst, mcproto.ReplyNotStored...)
			}
			return unexpected(dst, r)
		})
	case mcproto.CmdIncr, mcproto.CmdDecr:
		op, hits, misses := command.OpIncr, &st.IncrHits, &st.IncrMisses
		if req.Command == mcproto.CmdDecr {
			op, hits, misses = command.OpDecr, &st.DecrHits, &st.DecrMisses
		}
		cmd := &command.Command{Op: op, Key: req.Keys[0], Delta: req.Delta}
		return c.write(req, cmd, func(dst []byte, r command.Result) []byte {
			switch r.Status {
			case command.StatusValue:
				hits.Add(1)
				if r.Grew {
					st.TotalItems.Add(1)
				}
				return mcproto.AppendUint(dst, r.Value)
			case command.StatusNotFound:
				misses.Add(1)
				return append(dst, mcproto.ReplyNotFound...)
			case command.StatusNonNumeric:
				return mcproto.AppendLine(dst, mcproto.MsgNonNumericValue)
			}
			return unexpected(dst, r)
		})
	case mcproto.CmdTouch:
		st.CmdTouch.Add(1)
		cmd := &command.Command{Op: command.OpTouch, Key: req.Keys[0], Exptime: req.Exptime}
		return c.write(req, cmd, func(dst []byte, r command.Result) []byte {
			switch r.Status {
			case command.StatusTouched:
				st.TouchHits.Add(1)
				return append(dst, mcproto.ReplyTouched...)
			case command.StatusNotFound:
				st.TouchMisses.Add(1)
				return append(dst, mcproto.ReplyNotFound...)
			}
			return unexpected(dst, r)
		})
	case mcproto.CmdDelete:
		cmd := &command.Command{Op: command.OpDelete, Key: req.Keys[0]}
		return c.write(req, cmd, func(dst []byte, r command.Result) []byte {
			switch r.Status {
			case command.StatusDeleted:
				st.DeleteHits.Add(1)
				return append(dst, mcproto.ReplyDeleted...)
			case command.StatusNotFound:
				st.DeleteMisses.Add(1)
				return append(dst, mcproto.ReplyNotFound...)
			}
			return unexpected(dst, r)
		})
	case mcproto.CmdFlushAll:
		st.CmdFlush.Add(1)
		cmd := &command.Command{Op: command.OpFlush, Delay: max(req.Delay, 0)}
		return c.write(req, cmd, func(dst []byte, r command.Result) []byte {
			return append(dst, mcproto.ReplyOK...)
		})
	case mcproto.CmdVersion:
		st.count(req.Command, ResultOK, 1)
		return &reply{buf: mcproto.AppendVersion(nil, version.Memcached)}
	case mcproto.CmdVerbosity:
		st.count(req.Command, ResultOK, 1)
		if req.Noreply {
			return &reply{}
		}
		return &reply{buf: append([]byte(nil), mcproto.ReplyOK...)}
	case mcproto.CmdStats:
		c.waitOwnWrites() // counters must include this connection's writes
		buf, ok := c.statsReply(req.Args)
		if ok {
			st.count(req.Command, ResultOK, 1)
		} else {
			st.count(req.Command, ResultError, 1)
		}
		return &reply{buf: buf}
	}
	st.count(0, ResultError, 1)
	return &reply{buf: append([]byte(nil), mcproto.ReplyError...)}
}

// write submits one command and renders its result (nothing with noreply).
func (c *conn) write(req *mcproto.Request, cmd *command.Command, render func([]byte, command.Result) []byte) *reply {
	noreply := req.Noreply
	st, which := c.s.stats, req.Command
	call, err := c.submit(cmd)
	if err != nil {
		st.ServerErrors.Add(1)
		st.count(which, ResultServerError, 1)
		if noreply {
			return &reply{}
		}
		return &reply{buf: errorReply(nil, err)}
	}
	return c.pending([]*kv.Call{call}, func(dst []byte, res []command.Result, err error) []byte {
		if err != nil {
			st.ServerErrors.Add(1)
			st.count(which, ResultServerError, 1)
			if noreply {
				return dst
			}
			return errorReply(dst, err)
		}
		st.count(which, statusResult(res[0].Status), 1)
		out := render(dst, res[0])
		if noreply {
			return dst
		}
		return out
	})
}

// statusResult classifies a write's outcome the way its reply reads.
func statusResult(s command.Status) Result {
	switch s {
	case command.StatusStored:
		return ResultStored
	case command.StatusNotStored, command.StatusTooLarge:
		return ResultNotStored
	case command.StatusExists:
		return ResultExists
	case command.StatusNotFound:
		return ResultNotFound
	case command.StatusDeleted:
		return ResultDeleted
	case command.StatusTouched:
		return ResultTouched
	case command.StatusOK:
		return ResultOK
	case command.StatusValue, command.StatusHit:
		return ResultHit
	case command.StatusNonNumeric:
		return ResultClientError
	}
	return ResultServerError // unexpected
}

func unexpected(dst []byte, r command.Result) []byte {
	return mcproto.AppendServerError(dst, "unexpected result "+r.Status.String())
}

// get answers a get or gets. The reply is streamed: every getChunk bytes
// go to the writer as they are read (see replyBudget), and the returned
// reply is the rest.
func (c *conn) get(req *mcproto.Request) *reply {
	c.waitOwnWrites()
	st := c.s.stats
	st.CmdGet.Add(uint64(len(req.Keys)))
	if err := c.s.kv.Barrier(c.s.baseCtx, c.s.kv.Config().ReadConsistency); err != nil {
		st.ServerErrors.Add(1)
		st.count(req.Command, ResultServerError, 1)
		return &reply{buf: errorReply(nil, err)}
	}
	withCAS := req.Command == mcproto.CmdGets
	var buf []byte
	for _, k := range req.Keys {
		if len(buf) >= getChunk {
			c.send(c.budgeted(buf))
			buf = nil
		}
		if c.broken.Load() {
			return &reply{} // nobody will read the rest
		}
		it, ok, err := c.s.kv.Get(k)
		if err != nil {
			// Values already streamed cannot be taken back; the error
			// ends the reply in their place of END, as memcached does
			// when it fails midway through a multi-get.
			st.ServerErrors.Add(1)
			st.count(req.Command, ResultServerError, 1)
			return &reply{buf: errorReply(buf, err)}
		}
		if !ok {
			st.GetMisses.Add(1)
			st.count(req.Command, ResultMiss, 1)
			continue
		}
		st.GetHits.Add(1)
		st.count(req.Command, ResultHit, 1)
		buf = mcproto.AppendValue(buf, k, it.Flags, it.Value, it.CAS, withCAS)
	}
	return c.budgeted(mcproto.AppendEnd(buf))
}

// gat touches every key through the log (it changes expiry) and returns the
// hits, in key order.
//
// A touch comes back with its item's value, so a gat's touches hold their
// values until the reply is written. A gat of many keys is therefore
// proposed a chunk at a time, each chunk's hits streamed before the chunk
// after next is proposed: at most two chunks' values wait in memory per
// connection, across pipelined gats too, where proposing every key at once
// held them all (a 1 MiB line names about 4,000 keys of 250 bytes, or the
// same 1 MiB item over and over).
//
// A chunk's values are also held to about the reply budget, as get's are,
// not only its keys: 16 touches of a 1 MiB item are 16 MiB, and two chunks
// behind the one being written held 48 MiB per connection. Which values a
// touch returns is known only once it is applied, so the chunk size follows
// the value bytes per key of the connection's newest chunk rendered (at
// first, the item size limit): as many keys as fit in the budget, at least
// one, at most gatChunk; and while they are large, the next chunk waits for
// every chunk in flight to be rendered, so that one chunk's values wait
// behind the one being written. Small values keep chunks of gatChunk keys,
// two in flight. A gat whose small values give way to large ones midway
// still holds up to two chunks of them once (see gatKeyBytes).
func (c *conn) gat(req *mcproto.Request) *reply {
	st := c.s.stats
	// memcached counts a gat's keys as touches only, not as gets.
	st.CmdTouch.Add(uint64(len(req.Keys)))
	g := &gatReply{c: c, withCAS: req.Command == mcproto.CmdGats, which: req.Command, exptime: req.Exptime}
	keys := req.Keys
	for first := true; ; first = false {
		// A chunk is proposed once the chunk before the last one proposed
		// on this connection has been waited for, whether it belongs to
		// this gat or to one pipelined before it: the writer holds a
		// chunk's values until it gets to it, and a client that reads
		// nothing must stop being read from, not pile up gats.
		if d := c.gatDone[0]; d != nil {
			<-d
			c.gatDone[0] = nil
		}
		perKey := c.gatKeyBytes.Load()
		if perKey*gatChunk > replyBudget {
			// Large values: the last chunk too, so that only one chunk's
			// values wait behind the one the writer has.
			if d := c.gatDone[1]; d != nil {
				<-d
				c.gatDone[1] = nil
			}
			perKey = c.gatKeyBytes.Load()
		}
		if !first && (g.failed.Load() || c.broken.Load()) {
			return &reply{} // the reply has ended, or nobody reads it
		}
		n := min(len(keys), gatChunkKeys(perKey))
		last := n == len(keys)
		held := c.gatKeys.Add(int64(n))
		if probe := c.s.gatProbe.Load(); probe != nil {
			(*probe)(n, int(held))
		}
		rp, ok := g.chunk(keys[:n], last)
		rp.gatKeys = n
		c.gatDone[0], c.gatDone[1] = c.gatDone[1], rp.done
		if !ok || last {
			return rp
		}
		c.send(rp)
		keys = keys[n:]
	}
}

// gatChunkKeys is how many keys a gat chunk may have when each holds about
// perKey bytes of values: as many as fit in the reply budget, within
// [1, gatChunk].
func gatChunkKeys(perKey int64) int {
	if perKey <= 0 {
		return gatChunk
	}
	return int(max(1, min(replyBudget/perKey, gatChunk)))
}

// gatChunk is how many of a gat's keys are proposed together.
const gatChunk = 16

// valueHeaderMax bounds the bytes of a VALUE line besides its key: "VALUE ",
// flags, length and CAS with their spaces, and the two line ends.
const valueHeaderMax = 64

// gatReply is one gat's state across its chunks.
type gatReply struct {
	c       *conn
	withCAS bool
	which   mcproto.Command
	exptime int64
	// failed: a chunk's reply ended in an error line, which ends the whole
	// reply; later chunks add nothing. Set by the writer, read by the reader
	// once the chunk is written.
	failed atomic.Bool
}

// chunk proposes the touches of keys and returns the reply that renders
// their hits, and END when last. A refusal midway (ok false) returns the
// reply that ends the gat with the error, after the touches it had already
// proposed.
func (g *gatReply) chunk(keys [][]byte, last bool) (rp *reply, ok bool) {
	c, st := g.c, g.c.s.stats
	copies := make([][]byte, len(keys))
	calls := make([]*kv.Call, len(keys))
	for i, k := range keys {
		copies[i] = append([]byte(nil), k...)
		call, err := c.submit(&command.Command{Op: command.OpGAT, Key: k, Exptime: g.exptime})
		if err != nil {
			// The touches already proposed go ahead; the error comes after
			// them, in their place, as every reply on a connection does.
			st.ServerErrors.Add(1)
			st.count(g.which, ResultServerError, 1)
			return c.pending(calls[:i], func(dst []byte, _ []command.Result, _ error) []byte {
				if g.failed.Swap(true) {
					return dst
				}
				return errorReply(dst, err)
			}), false
		}
		calls[i] = call
	}
	return c.pending(calls, func(dst []byte, res []command.Result, err error) []byte {
		if g.failed.Load() {
			return dst
		}
		if err != nil {
			g.failed.Store(true)
			st.ServerErrors.Add(1)
			st.count(g.which, ResultServerError, 1)
			return errorReply(dst, err)
		}
		// Sized at once: grown by appending, a chunk of large values
		// left copies of up to twice its size behind.
		size := 0
		for i, r := range res {
			if r.Status == command.StatusHit {
				size += len(copies[i]) + len(r.Item.Value) + valueHeaderMax
			}
		}
		dst = slices.Grow(dst, size+len(mcproto.ReplyEnd))
		start := len(dst)
		for i, r := range res {
			if r.Status != command.StatusHit {
				st.TouchMisses.Add(1)
				st.count(g.which, ResultMiss, 1)
				continue
			}
			st.TouchHits.Add(1)
			st.count(g.which, ResultHit, 1)
			dst = mcproto.AppendValue(dst, copies[i], r.Item.Flags, r.Item.Value, r.Item.CAS, g.withCAS)
		}
		// Published before done is closed, for the reader to size the
		// next chunk by.
		if len(res) > 0 {
			c.gatKeyBytes.Store(int64((len(dst) - start + len(res) - 1) / len(res)))
		}
		if last {
			dst = mcproto.AppendEnd(dst)
		}
		return dst
	}), true
}

// statsGeneral answers `stats`. Running totals (t) are shown since the
// last `stats reset`, as memcached's stats_reset zeroes them; current state
// (u: connections, items, bytes) is not reset. It also returns the totals
// as read, for `stats reset` to keep.
func (c *conn) statsGeneral() ([]byte, map[string]uint64) {
	st := c.s.stats
	status := c.s.kv.Status()
	now := time.Now()
	var buf []byte
	u := func(name string, v uint64) { buf = mcproto.AppendStatUint(buf, name, v) }
	var base map[string]uint64
	if p := c.s.statsBase.Load(); p != nil {
		base = *p
	}
	totals := make(map[string]uint64, 32)
	t := func(name string, v uint64) {
		totals[name] = v
		u(name, v-base[name])
	}
	u("pid", uint64(os.Getpid()))
	u("uptime", uint64(now.Sub(st.Started)/time.Second))
	u("time", uint64(now.Unix()))
	buf = mcproto.AppendStat(buf, "version", version.Memcached)
	buf = mcproto.AppendStat(buf, "libevent", "none")
	u("pointer_size", strconv.IntSize)
	buf = appendRusage(buf)
	u("max_connections", uint64(c.s.cfg.MaxConnections))
	u("curr_connections", uint64(st.CurrConnections.Load()))
	t("total_connections", st.TotalConnections.Load())
	t("rejected_connections", st.RejectedConnections.Load())
	t("cmd_get", st.CmdGet.Load())
	t("cmd_set", st.CmdSet.Load())
	t("cmd_flush", st.CmdFlush.Load())
	t("cmd_touch", st.CmdTouch.Load())
	t("get_hits", st.GetHits.Load())
	t("get_misses", st.GetMisses.Load())
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
	t("bytes_read", st.BytesRead.Load())
	t("bytes_written", st.BytesWritten.Load())
	u("threads", uint64(runtime.GOMAXPROCS(0)))
	t("server_errors", st.ServerErrors.Load())
	store := c.s.kv.StoreStats()
	u("curr_items", uint64(max(store.Items, 0)))
	t("total_items", st.TotalItems.Load())
	u("bytes", uint64(max(store.Bytes, 0)))
	u("evictions", 0) // kvd never evicts: a full store is an error, not a silent drop
	if g := c.s.kv.Space(); g != nil {
		// kvd's own: free space of the data dir, and 1 while writes are
		// refused for lack of it (--min-free-disk).
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
	buf = mcproto.AppendStat(buf, "raft_role", status.Role)
	return mcproto.AppendEnd(buf), totals
}

func (c *conn) statsSettings() []byte {
	var buf []byte
	buf = mcproto.AppendStatUint(buf, "maxconns", uint64(c.s.cfg.MaxConnections))
	buf = mcproto.AppendStatUint(buf, "item_size_max", uint64(c.s.cfg.MaxItemSize))
	buf = mcproto.AppendStat(buf, "cas_enabled", "yes")
	buf = mcproto.AppendStat(buf, "evictions", "off")
	buf = mcproto.AppendStatUint(buf, "udpport", 0)
	return mcproto.AppendEnd(buf)
}
