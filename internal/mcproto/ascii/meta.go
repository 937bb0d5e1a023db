package ascii

import (
	"github.com/kvd-project/kvd/internal/mcproto"
)

// The meta commands' bounds, memcached 1.6.18's.
const (
	// maxMetaWords: memcached refuses a meta line whose token count,
	// which includes a terminal empty token, is over 20
	// (MFLAG_MAX_OPT_LENGTH), that is a line of 20 words or more.
	maxMetaWords = 19
	// maxOpaqueLen bounds an O token, its 'O' included.
	maxOpaqueLen = 32
)

// parseMeta reads a meta command (mg, ms, md, ma, mn, me): two-letter words
// starting with 'm', which share the connection and the line reader with
// the text protocol. w[0] is the command word.
//
// The checks run in the order memcached 1.6.18 runs them (process_mget,
// mset, mdelete and marithmetic_command in proto_text.c), because that
// order decides which error a line with several faults gets, and whether
// ms swallows its data block: it does for an error found once the length
// is read, not before. Every meta error is shown, q or not: memcached
// answers them with out_errstring, which clears noreply.
func (r *Reader) parseMeta(w [][]byte, req *mcproto.Request) error {
	var op mcproto.Op
	switch w[0][1] {
	case 'n':
		// memcached answers MN whatever follows the word.
		req.Op = mcproto.OpNoop
		req.Echo.Proto = mcproto.Meta
		return nil
	case 'e':
		return r.parseMetaDebug(w, req)
	case 'g':
		op = mcproto.OpMetaGet
	case 's':
		op = mcproto.OpMetaSet
	case 'd':
		op = mcproto.OpMetaDelete
	case 'a':
		op = mcproto.OpMetaArith
	default:
		return errUnknown()
	}
	if len(w) < 2 {
		return errUnknown()
	}
	// The key's bound applies to the token as sent, before any base64
	// decoding.
	if len(w[1]) > mcproto.MaxKeyLen {
		return metaError(MsgBadCommandLine)
	}
	first := 2 // the first flag token
	if op == mcproto.OpMetaSet {
		if len(w) == 2 {
			return metaError(MsgBadCommandLine)
		}
		first = 3
	}
	if len(w) > maxMetaWords {
		if op == mcproto.OpMetaGet {
			return metaError(MsgFlagsAreTooLong) // mg's wording has "are"
		}
		return metaError(MsgFlagsTooLong)
	}
	var vlen int32
	if op == mcproto.OpMetaSet {
		var ok bool
		if vlen, ok = mcproto.ParseInt32(w[2]); !ok || vlen < 0 || vlen > 1<<31-1-2 {
			return metaError(MsgBadCommandLine)
		}
	}

	var m mcproto.MetaFlags
	if op == mcproto.OpMetaArith {
		m.Delta = 1
	}
	flags := w[first:]
	key, bin, msg := r.metaFlags(w[1], flags, &m)
	if msg != "" {
		switch op {
		case mcproto.OpMetaSet:
			return r.swallowMeta(msg, vlen)
		case mcproto.OpMetaDelete, mcproto.OpMetaArith:
			// md and ma ignore the reason preparsing gave.
			msg = MsgInvalidOrDuplicateFlag
		}
		return metaError(msg)
	}

	opaqueTooLong := false
	for _, f := range flags {
		if f[0] == 'O' && len(f) > maxOpaqueLen {
			opaqueTooLong = true
		}
	}
	switch op {
	case mcproto.OpMetaSet:
		// memcached finds an over-long opaque first but reports a bad
		// mode ahead of it.
		switch m.Mode {
		case 0, 'E', 'A', 'P', 'R', 'S':
		default:
			return r.swallowMeta(MsgInvalidModeMS, vlen)
		}
		if opaqueTooLong {
			return r.swallowMeta(MsgOpaqueTooLong, vlen)
		}
	case mcproto.OpMetaArith:
		switch m.Mode {
		case 0, 'I', '+', 'D', '-':
		default:
			return metaError(MsgInvalidModeMA)
		}
		fallthrough
	default:
		// mg and ma find an over-long opaque only while rendering their
		// reply, after the item was read or changed; kvd refuses the
		// request before anything happens (see the package doc).
		if opaqueTooLong {
			return metaError(MsgOpaqueTooLong)
		}
	}

	echo := newMetaEcho(flags, key, bin)
	r.keys = append(r.keys[:0], echo.Key)
	req.Op = op
	req.Keys = r.keys
	req.Meta = m
	req.Echo = mcproto.Echo{Proto: mcproto.Meta, Op: op, Quiet: m.Has('q'), Meta: echo}
	if op != mcproto.OpMetaSet {
		return nil
	}

	// ms reads its data block as set does; the key is already copied out
	// of buf, which the block may overwrite.
	if int(vlen) > r.lim.MaxItemSize {
		r.skip = int64(vlen) + 2
		e := metaError(MsgObjectTooLarge)
		e.TooLarge = true
		return e
	}
	block, err := r.readBlock(int(vlen) + 2)
	if err != nil {
		*req = mcproto.Request{}
		return err
	}
	if block[vlen] != '\r' || block[vlen+1] != '\n' {
		// Not swallowed: what follows the block is read as commands.
		e := metaError(MsgBadDataChunk)
		e.Counted = mcproto.OpMetaSet
		*req = mcproto.Request{}
		return e
	}
	req.Data = block[:vlen]
	return nil
}

// metaError answers line whatever the request's q flag says.
func metaError(line string) *mcproto.Error { return mcproto.ReplyError(line, false) }

// swallowMeta answers an ms rejected once its length is known: its data
// block is discarded unread, as memcached discards it.
func (r *Reader) swallowMeta(line string, vlen int32) error {
	r.skip = int64(vlen) + 2
	return metaError(line)
}

// metaFlags reads the flag tokens into m as memcached's _meta_flag_preparse
// does, the same for every command: any command accepts any known letter.
// key is the key token; with b it is decoded (into r.key) and bin is set.
// msg is the error line, "" when the flags are fine.
//
// Which error wins is memcached's: a duplicate or unknown letter stops at
// once; a bad value is noted and the walk goes on, a later bad value's
// message replacing an earlier one's; a bad F changes no message, so alone
// it reports "bad command line format".
func (r *Reader) metaFlags(key []byte, flags [][]byte, m *mcproto.MetaFlags) (_ []byte, bin bool, msg string) {
	var seen [2]uint64 // one bit per byte below 128
	failed := false
	fail := func(s string) {
		failed = true
		if s != "" {
			msg = s
		}
	}
	for _, f := range flags {
		o := f[0]
		// memcached's table of seen letters has 127 entries: a token
		// starting with DEL or a byte over it is a "duplicate".
		if o >= 127 || seen[o/64]&(1<<(o%64)) != 0 {
			return nil, false, MsgDuplicateFlag
		}
		seen[o/64] |= 1 << (o % 64)
		v := f[1:]
		switch o {
		case 'b':
			bin = true
			n, ok := decodeBase64(r.key[:], key)
			key = r.key[:n]
			if !ok {
				fail(MsgDecodingKey)
			}
		case 'N', 'T', 'R':
			t, ok := mcproto.ParseInt32(v)
			if !ok {
				fail(MsgBadToken)
				break
			}
			switch o {
			case 'N':
				m.Vivify = int64(t)
			case 'T':
				m.TTL = int64(t)
			default:
				m.Recache = int64(t)
			}
		case 'F':
			var ok bool
			if m.ClientFlags, ok = mcproto.ParseUint32(v); !ok {
				fail("")
			}
		case 'C', 'E':
			n, ok := mcproto.ParseUint64(v)
			if !ok {
				fail(MsgBadToken)
			} else if o == 'C' {
				m.CompareCAS = n
			} else {
				m.NewCAS = n
			}
		case 'M':
			if len(f) != 2 {
				fail(MsgMTokenLength)
			} else {
				m.Mode = f[1]
			}
		case 'J':
			var ok bool
			if m.Initial, ok = mcproto.ParseUint64(v); !ok {
				fail(MsgInvalidInitial)
			}
		case 'D':
			var ok bool
			if m.Delta, ok = mcproto.ParseUint64(v); !ok {
				fail(MsgInvalidDeltaValue)
			}
		case 'O', 'P', 'L', 'k', 's', 't', 'c', 'f', 'v', 'h', 'l', 'u', 'q', 'I', 'x':
			// P and L are proxy hints memcached ignores.
		default:
			return nil, false, MsgInvalidFlag
		}
		m.Set(o)
	}
	if failed && msg == "" {
		msg = MsgBadCommandLine
	}
	return key, bin, msg
}

// parseMetaDebug handles "me <key> [b]": memcached checks no flag here;
// a third token of exactly "b" decodes the key.
func (r *Reader) parseMetaDebug(w [][]byte, req *mcproto.Request) error {
	if len(w) < 2 || len(w[1]) > mcproto.MaxKeyLen {
		return metaError(MsgBadCommandLine) // bare "me" too, not ERROR
	}
	key, bin := w[1], false
	if len(w) > 2 && string(w[2]) == "b" {
		n, ok := decodeBase64(r.key[:], key)
		if !ok {
			return metaError(MsgBadCommandLine)
		}
		key, bin = r.key[:n], true
	}
	echo := newMetaEcho(w[2:], key, bin)
	r.keys = append(r.keys[:0], echo.Key)
	req.Op = mcproto.OpMetaDebug
	req.Keys = r.keys
	req.Echo = mcproto.Echo{Proto: mcproto.Meta, Op: mcproto.OpMetaDebug, Meta: echo}
	return nil
}

// newMetaEcho copies a request's flag tokens, joined by single spaces, and
// its key into one allocation: the reply is rendered after the Reader's
// buffers have moved on.
func newMetaEcho(flags [][]byte, key []byte, bin bool) *mcproto.MetaEcho {
	n := len(key)
	for _, f := range flags {
		n += len(f) + 1
	}
	var buf []byte
	var e *mcproto.MetaEcho
	if n <= metaEchoInline {
		// One allocation for the echo and its bytes: this runs for every
		// meta request.
		eb := new(metaEchoBuf)
		buf, e = eb.b[:0:n], &eb.e
	} else {
		buf, e = make([]byte, 0, n), new(mcproto.MetaEcho)
	}
	for i, f := range flags {
		if i > 0 {
			buf = append(buf, ' ')
		}
		buf = append(buf, f...)
	}
	nf := len(buf)
	buf = append(buf, key...)
	*e = mcproto.MetaEcho{Flags: buf[:nf:nf], Key: buf[nf:], Base64: bin}
	return e
}

// metaEchoInline is how many bytes of flags and key an echo holds in its
// own allocation: a key of 40 bytes and a dozen flags.
const metaEchoInline = 64

// metaEchoBuf is an echo with room for its bytes.
type metaEchoBuf struct {
	e mcproto.MetaEcho
	b [metaEchoInline]byte
}

// b64Invalid marks a byte outside base64's alphabet in b64Values.
const b64Invalid = 0x80

// b64Values maps a byte to its base64 value; '=' counts as 0.
var b64Values = func() (t [256]byte) {
	for i := range t {
		t[i] = b64Invalid
	}
	for i, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") {
		t[c] = byte(i)
	}
	t['='] = 0
	return t
}()

// decodeBase64 decodes src into dst (which must hold len(src)*3/4 bytes)
// with memcached's base64_decode rules, which decide what a b key may be:
// bytes outside the alphabet are skipped wherever they are; the alphabet's
// bytes ('=' included) must number a non-zero multiple of 4; decoding stops
// after the first group of four that holds a '=' (one or two of them trim
// the group's output, three or four fail), so anything after it is
// ignored. A success always yields at least one byte.
func decodeBase64(dst, src []byte) (int, bool) {
	count := 0
	for _, c := range src {
		if b64Values[c] != b64Invalid {
			count++
		}
	}
	if count == 0 || count%4 != 0 {
		return 0, false
	}
	var group [4]byte
	n, k, pad := 0, 0, 0
	for _, c := range src {
		v := b64Values[c]
		if v == b64Invalid {
			continue
		}
		if c == '=' {
			pad++
		}
		group[k] = v
		if k++; k < 4 {
			continue
		}
		dst[n] = group[0]<<2 | group[1]>>4
		dst[n+1] = group[1]<<4 | group[2]>>2
		dst[n+2] = group[2]<<6 | group[3]
		n, k = n+3, 0
		if pad > 0 {
			if pad > 2 {
				return 0, false
			}
			return n - pad, true
		}
	}
	return n, true
}
