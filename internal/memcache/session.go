package memcache

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"

	"github.com/kvd-project/kvd/internal/command"
	"github.com/kvd-project/kvd/internal/kv"
	"github.com/kvd-project/kvd/internal/mcproto"
	"github.com/kvd-project/kvd/internal/mcserver"
	"github.com/kvd-project/kvd/internal/version"
)

// session is one connection's state; its methods run on the connection's
// reader goroutine, except the render closures, which the writer runs.
type session struct {
	s   *Service
	c   *mcserver.Conn
	enc mcproto.Encoder
	// menc is enc's meta rendering: the text protocol's codec has one;
	// senc its SASL rendering: the binary codec has one.
	menc mcproto.MetaEncoder
	senc mcproto.SASLEncoder
	// authed: the connection may send any request, because it has
	// authenticated or need not (Config.Auth nil). See auth.go.
	authed bool
	// metaReply is the reader goroutine's scratch for meta replies it
	// renders itself (a read's; a write's render on the writer).
	metaReply mcproto.MetaReply
	// gatDone are the done channels of the last two gat chunks proposed on
	// this connection, older first (see gat).
	gatDone [2]<-chan struct{}
	// gatKeys counts the keys of gat chunks proposed on this connection
	// and not yet written: what holds their values in memory.
	gatKeys atomic.Int64
	// gatKeyBytes is the reply bytes per key of the newest gat chunk the
	// writer rendered, or before any the item size limit (the most a key
	// can hold): how gat sizes its next chunk. An estimate, not a bound:
	// a gat whose values grow from small to large midway has chunks of
	// gatChunk keys of them in flight until one of them is rendered.
	gatKeyBytes atomic.Int64
}

var storageOps = map[mcproto.Op]command.Op{
	mcproto.OpSet: command.OpSet, mcproto.OpAdd: command.OpAdd, mcproto.OpReplace: command.OpReplace,
	mcproto.OpAppend: command.OpAppend, mcproto.OpPrepend: command.OpPrepend, mcproto.OpCas: command.OpCAS,
}

// Handle turns one request into its reply (final, or pending on writes).
func (ss *session) Handle(req *mcproto.Request) *mcserver.Reply {
	st, enc, e := ss.s.stats, ss.enc, req.Echo
	if !ss.authed {
		if rp := ss.refuse(req); rp != nil {
			return rp
		}
	}
	if w := ss.s.cfg.Witness; w != nil && !witnessAnswers(req.Op) {
		st.count(0, ResultError, 1)
		return mcserver.Final(enc.AppendError(nil, e, mcproto.KindServer, w()))
	}
	switch req.Op {
	case mcproto.OpGet, mcproto.OpGets:
		return ss.get(req)
	case mcproto.OpGat, mcproto.OpGats:
		return ss.gat(req)
	case mcproto.OpSet, mcproto.OpAdd, mcproto.OpReplace, mcproto.OpAppend, mcproto.OpPrepend, mcproto.OpCas:
		return ss.store(req)
	case mcproto.OpIncr, mcproto.OpDecr:
		return ss.arith(req)
	case mcproto.OpTouch:
		return ss.touch(req)
	case mcproto.OpDelete:
		return ss.delete(req)
	case mcproto.OpMetaGet, mcproto.OpMetaSet, mcproto.OpMetaDelete, mcproto.OpMetaArith, mcproto.OpMetaDebug:
		if ss.menc == nil { // a codec that decodes meta renders it too
			break
		}
		switch req.Op {
		case mcproto.OpMetaGet:
			return ss.metaGet(req)
		case mcproto.OpMetaSet:
			return ss.metaSet(req)
		case mcproto.OpMetaDelete:
			return ss.metaDelete(req)
		case mcproto.OpMetaArith:
			return ss.metaArith(req)
		default:
			return ss.metaDebug(req)
		}
	case mcproto.OpFlushAll:
		st.CmdFlush.Add(1)
		cmd := &command.Command{Op: command.OpFlush, Delay: max(req.Delay, 0)}
		return ss.write(e, cmd, func(dst []byte, r command.Result) []byte {
			return enc.AppendStatus(dst, e, mcproto.StatusOK, 0)
		})
	case mcproto.OpVersion:
		st.count(req.Op, ResultOK, 1)
		return mcserver.Final(enc.AppendVersion(nil, e, version.Memcached))
	case mcproto.OpVerbosity:
		st.count(req.Op, ResultOK, 1)
		return mcserver.Final(enc.AppendStatus(nil, e, mcproto.StatusOK, 0))
	case mcproto.OpQuit:
		return mcserver.Final(enc.AppendStatus(nil, e, mcproto.StatusQuit, 0))
	case mcproto.OpNoop:
		return mcserver.Final(enc.AppendStatus(nil, e, mcproto.StatusNoop, 0))
	case mcproto.OpSASLList, mcproto.OpSASLAuth, mcproto.OpSASLStep:
		if ss.s.cfg.Auth != nil {
			return ss.sasl(req)
		}
		// Authentication is off: the SASL opcodes are unknown commands,
		// as to a memcached started without -S.
		st.count(0, ResultError, 1)
		return mcserver.Final(enc.AppendError(nil, e, mcproto.KindError, ""))
	case mcproto.OpStats:
		ss.c.WaitOwnWrites() // counters must include this connection's writes
		buf, ok := ss.statsReply(e, req.Args)
		if ok {
			st.count(req.Op, ResultOK, 1)
		} else {
			st.count(req.Op, ResultError, 1)
		}
		return mcserver.Final(buf)
	}
	st.count(0, ResultError, 1)
	return mcserver.Final(enc.AppendError(nil, e, mcproto.KindError, ""))
}

// witnessAnswers reports whether a witness answers op itself: everything
// but the data.
func witnessAnswers(op mcproto.Op) bool {
	switch op {
	case mcproto.OpVersion, mcproto.OpVerbosity, mcproto.OpQuit, mcproto.OpNoop, mcproto.OpStats:
		return true
	}
	return false
}

// store answers set, add, replace, append, prepend and cas.
func (ss *session) store(req *mcproto.Request) *mcserver.Reply {
	st, enc, e := ss.s.stats, ss.enc, req.Echo
	st.CmdSet.Add(1)
	cmd := &command.Command{Op: storageOps[req.Op], Key: req.Keys[0], Value: req.Data,
		Flags: req.Flags, Exptime: req.Exptime, CAS: req.CAS}
	if req.CAS != 0 {
		// An append or prepend that must match a CAS (the binary
		// protocol's; set, add and replace with one are cas).
		switch req.Op {
		case mcproto.OpAppend:
			cmd.Op = command.OpAppendCAS
		case mcproto.OpPrepend:
			cmd.Op = command.OpPrependCAS
		}
	}
	isCAS := req.Op == mcproto.OpCas
	return ss.write(e, cmd, func(dst []byte, r command.Result) []byte {
		switch r.Status {
		case command.StatusStored:
			st.TotalItems.Add(1)
			if isCAS {
				st.CasHits.Add(1)
			}
			return enc.AppendStatus(dst, e, mcproto.StatusStored, r.CAS)
		case command.StatusNotStored:
			return enc.AppendStatus(dst, e, mcproto.StatusNotStored, 0)
		case command.StatusExists:
			if isCAS { // not an append or prepend with a stale CAS
				st.CasBadval.Add(1)
			}
			return enc.AppendStatus(dst, e, mcproto.StatusExists, 0)
		case command.StatusNotFound:
			st.CasMisses.Add(1)
			return enc.AppendStatus(dst, e, mcproto.StatusNotFound, 0)
		case command.StatusTooLarge:
			// An append or prepend whose result would exceed the item
			// size limit: memcached 1.6 fails to allocate the combined
			// item and answers NOT_STORED, keeping the old value.
			return enc.AppendStatus(dst, e, mcproto.StatusNotStored, 0)
		}
		return ss.unexpected(dst, e, r)
	})
}

// arith answers incr and decr.
func (ss *session) arith(req *mcproto.Request) *mcserver.Reply {
	st, enc, e := ss.s.stats, ss.enc, req.Echo
	op, hits, misses := command.OpIncr, &st.IncrHits, &st.IncrMisses
	if req.Op == mcproto.OpDecr {
		op, hits, misses = command.OpDecr, &st.DecrHits, &st.DecrMisses
	}
	cmd := &command.Command{Op: op, Key: req.Keys[0], Delta: req.Delta}
	if req.Create || req.CAS != 0 {
		// With a counter to create, or a CAS to match: the binary
		// protocol's incr and decr.
		cmd = &command.Command{Op: command.OpArith, Key: req.Keys[0], Delta: req.Delta, Decr: op == command.OpDecr,
			CAS: req.CAS, Create: req.Create, Initial: req.Initial, Exptime: req.Exptime}
	}
	return ss.write(e, cmd, func(dst []byte, r command.Result) []byte {
		switch r.Status {
		case command.StatusValue:
			if r.Created {
				st.TotalItems.Add(1) // neither a hit nor a miss, as memcached counts it
			} else {
				hits.Add(1)
			}
			if r.Grew {
				st.TotalItems.Add(1)
			}
			return enc.AppendNumber(dst, e, r.Value, r.CAS)
		case command.StatusExists:
			return enc.AppendStatus(dst, e, mcproto.StatusExists, 0)
		case command.StatusNotFound:
			misses.Add(1)
			return enc.AppendStatus(dst, e, mcproto.StatusNotFound, 0)
		case command.StatusNonNumeric:
			return enc.AppendError(dst, e, mcproto.KindNonNumeric, "")
		}
		return ss.unexpected(dst, e, r)
	})
}

// touch answers touch.
func (ss *session) touch(req *mcproto.Request) *mcserver.Reply {
	st, enc, e := ss.s.stats, ss.enc, req.Echo
	st.CmdTouch.Add(1)
	cmd := &command.Command{Op: command.OpTouch, Key: req.Keys[0], Exptime: req.Exptime}
	key := append([]byte(nil), req.Keys[0]...) // the render runs after the codec moved on
	return ss.write(e, cmd, func(dst []byte, r command.Result) []byte {
		switch r.Status {
		case command.StatusTouched:
			st.TouchHits.Add(1)
			ss.s.access.note(key, &r.Item) // memcached's touch bumps the item: h1
			return enc.AppendHit(dst, e, nil, r.Item.Flags, nil, r.Item.CAS)
		case command.StatusNotFound:
			st.TouchMisses.Add(1)
			return enc.AppendStatus(dst, e, mcproto.StatusNotFound, 0)
		}
		return ss.unexpected(dst, e, r)
	})
}

// delete answers delete.
func (ss *session) delete(req *mcproto.Request) *mcserver.Reply {
	st, enc, e := ss.s.stats, ss.enc, req.Echo
	cmd := &command.Command{Op: command.OpDelete, Key: req.Keys[0]}
	if req.CAS != 0 {
		cmd = &command.Command{Op: command.OpDeleteCAS, Key: req.Keys[0], CAS: req.CAS}
	}
	return ss.write(e, cmd, func(dst []byte, r command.Result) []byte {
		switch r.Status {
		case command.StatusExists:
			return enc.AppendStatus(dst, e, mcproto.StatusExists, 0)
		case command.StatusDeleted:
			st.DeleteHits.Add(1)
			return enc.AppendStatus(dst, e, mcproto.StatusDeleted, 0)
		case command.StatusNotFound:
			st.DeleteMisses.Add(1)
			return enc.AppendStatus(dst, e, mcproto.StatusNotFound, 0)
		}
		return ss.unexpected(dst, e, r)
	})
}

// Rejected counts a request the codec refused and answers what the codec
// said. A set refused as too large also deletes the old item, as memcached
// does, so that a client never reads a stale value it believes it replaced.
func (ss *session) Rejected(req *mcproto.Request, perr *mcproto.Error) *mcserver.Reply {
	st := ss.s.stats
	if !ss.authed {
		if rp := ss.refuseRejected(req, perr); rp != nil {
			return rp
		}
	}
	if perr.TooLarge {
		if req.Echo.Proto != mcproto.Binary {
			// memcached counts the text protocol's refusals only.
			st.StoreTooLarge.Add(1)
		}
		st.count(req.Op, ResultServerError, 1)
		if (req.Op == mcproto.OpSet || req.Op == mcproto.OpMetaSet) && len(req.Keys) == 1 {
			if call, err := ss.submit(&command.Command{Op: command.OpDelete, Key: req.Keys[0]}); err == nil {
				ss.c.Send(ss.c.Pending(func() []byte {
					_, _ = call.Wait(ss.c.Context())
					return nil
				}))
			}
		}
		return mcserver.Final(perr.Reply)
	}
	// The codec rejected the request, so which operation it meant is not
	// reliable: such requests count as "unknown", except in the general
	// stats where memcached counts them anyway.
	st.count(0, kindResult(perr.Kind), 1)
	st.countRejected(perr.Counted)
	return mcserver.Final(perr.Reply)
}

// kindResult classifies an error for the per-command counters.
func kindResult(k mcproto.ErrorKind) Result {
	switch k {
	case mcproto.KindError:
		return ResultError
	case mcproto.KindClient, mcproto.KindNonNumeric, mcproto.KindAuth:
		return ResultClientError
	}
	return ResultServerError
}

// submit proposes one command, keeping connection order, after the reads
// this node noted (accessMarks.Send).
func (ss *session) submit(cmd *command.Command) (*kv.Call, error) {
	ss.s.access.Send(ss.c.Context())
	return ss.s.kv.Submit(ss.c.Context(), cmd)
}

// pending builds a reply that waits for calls and renders their results.
func (ss *session) pending(calls []*kv.Call, render func([]byte, []command.Result, error) []byte) *mcserver.Reply {
	ctx := ss.c.Context()
	return ss.c.Pending(func() []byte {
		res := make([]command.Result, len(calls))
		var firstErr error
		for i, call := range calls {
			if call == nil {
				continue
			}
			r, err := call.Wait(ctx)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			res[i] = r
		}
		return render(nil, res, firstErr)
	})
}

// write submits one command and renders its result.
func (ss *session) write(e mcproto.Echo, cmd *command.Command, render func([]byte, command.Result) []byte) *mcserver.Reply {
	st, which := ss.s.stats, e.Op
	call, err := ss.submit(cmd)
	if err != nil {
		if errors.Is(err, kv.ErrNoSpace) && which.IsStorage() {
			st.StoreNoMemory.Add(1)
		}
		st.ServerErrors.Add(1)
		st.count(which, ResultServerError, 1)
		return mcserver.Final(ss.errorReply(nil, e, err))
	}
	return ss.pending([]*kv.Call{call}, func(dst []byte, res []command.Result, err error) []byte {
		if err != nil {
			st.ServerErrors.Add(1)
			st.count(which, ResultServerError, 1)
			return ss.errorReply(dst, e, err)
		}
		result := statusResult(res[0].Status)
		if which == mcproto.OpMetaGet && result == ResultNotFound {
			result = ResultMiss // an mg through the log is still a read
		}
		st.count(which, result, 1)
		return render(dst, res[0])
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

func (ss *session) unexpected(dst []byte, e mcproto.Echo, r command.Result) []byte {
	return ss.enc.AppendError(dst, e, mcproto.KindServer, "unexpected result "+r.Status.String())
}

// errorReply renders a failed request: no quorum, busy, no space, a
// timeout, shutting down.
func (ss *session) errorReply(dst []byte, e mcproto.Echo, err error) []byte {
	kind, msg := errorKind(err)
	return ss.enc.AppendError(dst, e, kind, msg)
}

// errorKind maps a kv error to the kind of reply it gets and the words a
// text reply says after SERVER_ERROR.
func errorKind(err error) (mcproto.ErrorKind, string) {
	switch {
	case errors.Is(err, kv.ErrNoLeader), errors.Is(err, kv.ErrNotReady):
		return mcproto.KindServer, "unavailable: no quorum or leader"
	case errors.Is(err, kv.ErrBusy):
		return mcproto.KindBusy, "busy: too many requests in flight"
	case errors.Is(err, kv.ErrNoSpace):
		// What memcached -M answers when it is full and may not evict.
		return mcproto.KindOutOfMemory, ""
	case errors.Is(err, kv.ErrUnknownOutcome):
		return mcproto.KindServer, "timeout: outcome unknown, the write may have been applied"
	case errors.Is(err, kv.ErrTimeout):
		return mcproto.KindServer, "timeout"
	case errors.Is(err, kv.ErrClusterVersion):
		// "not every member runs a kvd that applies this operation yet:
		// ms needs cluster version 5, the cluster is at 4".
		return mcproto.KindServer, err.Error()
	case errors.Is(err, kv.ErrStopped), errors.Is(err, context.Canceled):
		return mcproto.KindServer, "shutting down"
	default:
		return mcproto.KindServer, err.Error()
	}
}

// get answers a get or gets. The reply is streamed: every getChunk bytes
// go to the writer as they are read (see replyBudget), and the returned
// reply is the rest.
func (ss *session) get(req *mcproto.Request) *mcserver.Reply {
	c, st, enc, e := ss.c, ss.s.stats, ss.enc, req.Echo
	c.WaitOwnWrites()
	st.CmdGet.Add(uint64(len(req.Keys)))
	if err := ss.s.kv.Barrier(c.Context(), ss.s.kv.Config().ReadConsistency); err != nil {
		st.ServerErrors.Add(1)
		st.count(req.Op, ResultServerError, 1)
		return mcserver.Final(ss.errorReply(nil, e, err))
	}
	var buf []byte
	now := ss.s.kv.Now() // the cluster's time, which items' expiry is in
	for _, k := range req.Keys {
		if len(buf) >= mcserver.GetChunk {
			c.Send(c.Budgeted(buf))
			buf = nil
		}
		if c.Broken() {
			return mcserver.Final(nil) // nobody will read the rest
		}
		it, ok, err := ss.s.kv.Get(k)
		if err != nil {
			// Values already streamed cannot be taken back; the error
			// ends the reply in their place of END, as memcached does
			// when it fails midway through a multi-get.
			st.ServerErrors.Add(1)
			st.count(req.Op, ResultServerError, 1)
			return mcserver.Final(ss.errorReply(buf, e, err))
		}
		if !ok {
			st.GetMisses.Add(1)
			st.count(req.Op, ResultMiss, 1)
			buf = enc.AppendMiss(buf, e, k)
			continue
		}
		st.GetHits.Add(1)
		st.count(req.Op, ResultHit, 1)
		if wantsAccessMark(&it, now) {
			ss.s.access.note(k, &it)
		}
		buf = enc.AppendHit(buf, e, k, it.Flags, it.Value, it.CAS)
	}
	return c.Budgeted(enc.AppendEnd(buf, e))
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
func (ss *session) gat(req *mcproto.Request) *mcserver.Reply {
	c, st := ss.c, ss.s.stats
	// memcached counts a gat's keys as touches only, not as gets.
	st.CmdTouch.Add(uint64(len(req.Keys)))
	g := &gatReply{ss: ss, e: req.Echo, exptime: req.Exptime}
	keys := req.Keys
	for first := true; ; first = false {
		// A chunk is proposed once the chunk before the last one proposed
		// on this connection has been waited for, whether it belongs to
		// this gat or to one pipelined before it: the writer holds a
		// chunk's values until it gets to it, and a client that reads
		// nothing must stop being read from, not pile up gats.
		if d := ss.gatDone[0]; d != nil {
			<-d
			ss.gatDone[0] = nil
		}
		perKey := ss.gatKeyBytes.Load()
		if perKey*gatChunk > mcserver.ReplyBudget {
			// Large values: the last chunk too, so that only one chunk's
			// values wait behind the one the writer has.
			if d := ss.gatDone[1]; d != nil {
				<-d
				ss.gatDone[1] = nil
			}
			perKey = ss.gatKeyBytes.Load()
		}
		if !first && (g.failed.Load() || c.Broken()) {
			return mcserver.Final(nil) // the reply has ended, or nobody reads it
		}
		n := min(len(keys), gatChunkKeys(perKey))
		last := n == len(keys)
		ss.gatKeys.Add(int64(n))
		rp, done, ok := g.chunk(keys[:n], last)
		rp.AfterWrite(func() { ss.gatKeys.Add(-int64(n)) })
		ss.gatDone[0], ss.gatDone[1] = ss.gatDone[1], done
		if !ok || last {
			return rp
		}
		c.Send(rp)
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
	return int(max(1, min(mcserver.ReplyBudget/perKey, gatChunk)))
}

// gatChunk is how many of a gat's keys are proposed together.
const gatChunk = 16

// valueHeaderMax bounds the bytes of a VALUE line besides its key: "VALUE ",
// flags, length and CAS with their spaces, and the two line ends.
const valueHeaderMax = 64

// gatReply is one gat's state across its chunks.
type gatReply struct {
	ss      *session
	e       mcproto.Echo
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
func (g *gatReply) chunk(keys [][]byte, last bool) (rp *mcserver.Reply, done <-chan struct{}, ok bool) {
	ss, st, enc, e := g.ss, g.ss.s.stats, g.ss.enc, g.e
	copies := make([][]byte, len(keys))
	calls := make([]*kv.Call, len(keys))
	for i, k := range keys {
		copies[i] = append([]byte(nil), k...)
		call, err := ss.submit(&command.Command{Op: command.OpGAT, Key: k, Exptime: g.exptime})
		if err != nil {
			// The touches already proposed go ahead; the error comes after
			// them, in their place, as every reply on a connection does.
			st.ServerErrors.Add(1)
			st.count(e.Op, ResultServerError, 1)
			rp := ss.pending(calls[:i], func(dst []byte, _ []command.Result, _ error) []byte {
				if g.failed.Swap(true) {
					return dst
				}
				return ss.errorReply(dst, e, err)
			})
			return rp, rp.Done(), false
		}
		calls[i] = call
	}
	rp = ss.pending(calls, func(dst []byte, res []command.Result, err error) []byte {
		if g.failed.Load() {
			return dst
		}
		if err != nil {
			g.failed.Store(true)
			st.ServerErrors.Add(1)
			st.count(e.Op, ResultServerError, 1)
			return ss.errorReply(dst, e, err)
		}
		// Sized at once: grown by appending, a chunk of large values
		// left copies of up to twice its size behind.
		size := 0
		for i, r := range res {
			if r.Status == command.StatusHit {
				size += len(copies[i]) + len(r.Item.Value) + valueHeaderMax
			}
		}
		dst = slices.Grow(dst, size+endMax)
		start := len(dst)
		for i, r := range res {
			if r.Status != command.StatusHit {
				st.TouchMisses.Add(1)
				st.count(e.Op, ResultMiss, 1)
				dst = enc.AppendMiss(dst, e, copies[i])
				continue
			}
			st.TouchHits.Add(1)
			st.count(e.Op, ResultHit, 1)
			if wantsAccessMark(&r.Item, ss.s.kv.Now()) {
				ss.s.access.note(copies[i], &r.Item)
			}
			dst = enc.AppendHit(dst, e, copies[i], r.Item.Flags, r.Item.Value, r.Item.CAS)
		}
		// Published before done is closed, for the reader to size the
		// next chunk by.
		if len(res) > 0 {
			ss.gatKeyBytes.Store(int64((len(dst) - start + len(res) - 1) / len(res)))
		}
		if last {
			dst = enc.AppendEnd(dst, e)
		}
		return dst
	})
	return rp, rp.Done(), true
}

// endMax bounds the bytes that end a retrieval in any protocol.
const endMax = 32
