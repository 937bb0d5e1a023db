package ascii

import (
	"encoding/base64"
	"slices"
	"strconv"
	"strings"

	"github.com/kvd-project/kvd/internal/mcproto"
)

var _ mcproto.MetaEncoder = (*Codec)(nil)

// noEcho stands in for a missing echo (never written to).
var noEcho mcproto.MetaEcho

// AppendMeta appends the reply to the meta request e echoes, as memcached
// 1.6.18 renders it (proto_text.c): a two-letter code, then, walking the
// request's flag tokens in order, the tokens that command returns, then for
// mg the Z, X and W marks and for mg and ma the value. Quiet requests drop
// mg's EN, the HD of ms and md, and ma's HD or VA for an item that was
// there. Errors are not rendered here: AppendError shows them, q or not.
func (*Codec) AppendMeta(dst []byte, e mcproto.Echo, r *mcproto.MetaReply) []byte {
	me := e.Meta
	if me == nil {
		me = &noEcho
	}
	switch e.Op {
	case mcproto.OpNoop:
		return append(dst, "MN\r\n"...)
	case mcproto.OpMetaGet:
		switch r.Status {
		case mcproto.StatusHit:
			return appendMetaGetHit(dst, me, r)
		case mcproto.StatusNotFound:
			if e.Quiet {
				return dst
			}
			return appendMetaLine(dst, "EN", "Ok", me, r)
		}
	case mcproto.OpMetaSet, mcproto.OpMetaDelete:
		// The nominal reply (ms stored, md deleted) is HD, which q drops.
		// ms's c is the stored item's CAS; memcached answers c0 when
		// nothing was stored.
		nominal, want := mcproto.StatusDeleted, "Ok"
		if e.Op == mcproto.OpMetaSet {
			nominal, want = mcproto.StatusStored, "Okc"
		}
		if r.Status == nominal {
			if e.Quiet {
				return dst
			}
			return appendMetaLine(dst, "HD", want, me, r)
		}
		if code := metaCode(r.Status); code != "" {
			return appendMetaLine(dst, code, want, me, r)
		}
	case mcproto.OpMetaArith:
		if r.Status == mcproto.StatusHit {
			// memcached skips the reply of an ma that found its item
			// under q, VA included; one that vivified it answers.
			if e.Quiet && !r.Created {
				return dst
			}
			return appendMetaArithHit(dst, me, r)
		}
		if code := metaCode(r.Status); code != "" {
			return appendMetaLine(dst, code, "Ok", me, r)
		}
	case mcproto.OpMetaDebug:
		switch r.Status {
		case mcproto.StatusHit:
			return appendMetaDebug(dst, me, r)
		case mcproto.StatusNotFound:
			return append(dst, "EN\r\n"...)
		}
	}
	return AppendServerError(dst, "unexpected meta reply "+strconv.Itoa(int(r.Status))+" to "+e.Op.String())
}

// metaCode is the two letters of a failed ms, md or ma: NS, EX, NF; ""
// for any other outcome.
func metaCode(s mcproto.Status) string {
	switch s {
	case mcproto.StatusNotStored:
		return "NS"
	case mcproto.StatusExists:
		return "EX"
	case mcproto.StatusNotFound:
		return "NF"
	}
	return ""
}

// appendMetaLine appends code, the tokens of want (flag letters) the
// request had, in its order, and the line end.
func appendMetaLine(dst []byte, code, want string, me *mcproto.MetaEcho, r *mcproto.MetaReply) []byte {
	dst = slices.Grow(dst, metaLineSize(me))
	dst = append(dst, code...)
	dst = appendMetaFlags(dst, want, me, r)
	return append(dst, "\r\n"...)
}

// appendMetaGetHit renders an mg hit: VA with v (and the value after the
// line), else HD; the item's tokens; Z, X and W.
func appendMetaGetHit(dst []byte, me *mcproto.MetaEcho, r *mcproto.MetaReply) []byte {
	v := me.HasFlag('v')
	n := metaLineSize(me)
	if v {
		n += len(r.Value) + 2
	}
	dst = slices.Grow(dst, n)
	if v {
		dst = append(dst, "VA "...)
		dst = strconv.AppendInt(dst, int64(len(r.Value)), 10)
	} else {
		dst = append(dst, "HD"...)
	}
	dst = appendMetaFlags(dst, "stcflhOk", me, r)
	// memcached writes Z before it decides W, so a request that wins
	// never sees Z (TokenSent is the state before this request).
	if r.TokenSent {
		dst = append(dst, " Z"...)
	}
	if r.Stale {
		dst = append(dst, " X"...)
	}
	if r.Won {
		dst = append(dst, " W"...)
	}
	dst = append(dst, "\r\n"...)
	if v {
		dst = append(dst, r.Value...)
		dst = append(dst, "\r\n"...)
	}
	return dst
}

// appendMetaArithHit renders ma's success: HD, or VA with v, whose number
// follows the line as a value.
func appendMetaArithHit(dst []byte, me *mcproto.MetaEcho, r *mcproto.MetaReply) []byte {
	v := me.HasFlag('v')
	dst = slices.Grow(dst, metaLineSize(me)+len(r.Value)+2)
	if v {
		dst = append(dst, "VA "...)
		dst = strconv.AppendInt(dst, int64(len(r.Value)), 10)
	} else {
		dst = append(dst, "HD"...)
	}
	dst = appendMetaFlags(dst, "ctOk", me, r)
	if v {
		dst = append(dst, "\r\n"...)
		dst = append(dst, r.Value...)
	}
	return append(dst, "\r\n"...)
}

// appendMetaDebug renders me's line. exp is the seconds the item has left
// (-1 for none), as newer memcached prints it; 1.6.18 printed their
// negation. kvd has no slab classes: cls is always 1.
func appendMetaDebug(dst []byte, me *mcproto.MetaEcho, r *mcproto.MetaReply) []byte {
	dst = slices.Grow(dst, metaLineSize(me)+100)
	dst = append(dst, "ME "...)
	dst = appendMetaKey(dst, me)
	dst = append(dst, " exp="...)
	dst = strconv.AppendInt(dst, r.TTL, 10)
	dst = append(dst, " la="...)
	dst = strconv.AppendInt(dst, r.LastAccess, 10)
	dst = append(dst, " cas="...)
	dst = strconv.AppendUint(dst, r.CAS, 10)
	if r.Fetched {
		dst = append(dst, " fetch=yes"...)
	} else {
		dst = append(dst, " fetch=no"...)
	}
	dst = append(dst, " cls=1 size="...)
	dst = strconv.AppendInt(dst, int64(r.Size), 10)
	return append(dst, "\r\n"...)
}

// appendMetaFlags walks the request's flag tokens in order and renders
// those whose letter is in want, each after a space.
func appendMetaFlags(dst []byte, want string, me *mcproto.MetaEcho, r *mcproto.MetaReply) []byte {
	ttl := r.TTL
	if r.Ordered {
		ttl = r.TTLBefore
	}
	for rest := me.Flags; len(rest) > 0; {
		i := 0
		for i < len(rest) && rest[i] != ' ' {
			i++
		}
		tok := rest[:i]
		rest = rest[min(i+1, len(rest)):]
		if len(tok) > 0 && r.Ordered {
			// T and N take effect where they stand: a t after them
			// reports them.
			switch {
			case tok[0] == 'T':
				ttl = r.TTLSet
			case tok[0] == 'N' && r.Created:
				ttl = r.TTLVivify
			}
		}
		if len(tok) == 0 || strings.IndexByte(want, tok[0]) < 0 {
			continue
		}
		switch tok[0] {
		case 'O':
			dst = append(dst, ' ')
			dst = append(dst, tok...)
		case 'k':
			dst = append(dst, " k"...)
			dst = appendMetaKey(dst, me)
			if me.Base64 {
				dst = append(dst, " b"...)
			}
		case 'c':
			dst = append(dst, " c"...)
			dst = strconv.AppendUint(dst, r.CAS, 10)
		case 's':
			dst = append(dst, " s"...)
			dst = strconv.AppendInt(dst, int64(r.Size), 10)
		case 't':
			dst = append(dst, " t"...)
			dst = strconv.AppendInt(dst, ttl, 10)
		case 'f':
			dst = append(dst, " f"...)
			dst = strconv.AppendUint(dst, uint64(r.Flags), 10)
		case 'l':
			dst = append(dst, " l"...)
			dst = strconv.AppendInt(dst, r.LastAccess, 10)
		case 'h':
			if r.Fetched {
				dst = append(dst, " h1"...)
			} else {
				dst = append(dst, " h0"...)
			}
		}
	}
	return dst
}

// appendMetaKey appends the key, base64-encoded again when it came so.
func appendMetaKey(dst []byte, me *mcproto.MetaEcho) []byte {
	if me.Base64 {
		return base64.StdEncoding.AppendEncode(dst, me.Key)
	}
	return append(dst, me.Key...)
}

// metaLineSize bounds a reply line without its value: the code, every
// token at its longest (a letter and 20 digits, or the token itself), the
// key in base64 with " k" and " b", the marks and the line end.
func metaLineSize(me *mcproto.MetaEcho) int {
	tokens := (len(me.Flags) + 1) / 2
	return 24 + len(me.Flags) + 22*tokens + base64.StdEncoding.EncodedLen(len(me.Key)) + 4 + 6 + 2
}
