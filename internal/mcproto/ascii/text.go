package ascii

import (
	"bytes"

	"github.com/kvd-project/kvd/internal/mcproto"
)

// errUnknown answers a line memcached does not understand, or a known
// command with the wrong number of tokens.
func errUnknown() *mcproto.Error { return mcproto.ReplyError(MsgError, false) }

// parse interprets one request line (without its '\n') and, for storage
// commands, reads the data block that follows. The order of the checks is
// memcached's (process_command_ascii and the process_*_command functions of
// proto_text.c), because it decides which error wins and whether noreply
// already applies to it.
func (r *Reader) parse(line []byte, req *mcproto.Request) error {
	// memcached drops one '\r' before the '\n' (if the line has more than
	// one byte), then treats the line as a C string: a NUL ends it.
	if n := len(line); n > 1 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if i := bytes.IndexByte(line, 0); i >= 0 {
		line = line[:i]
	}
	w := r.tokenize(line)
	if len(w) == 0 || len(w[0]) < 2 {
		return errUnknown()
	}
	cmd := w[0]

	// The branches follow memcached's dispatch: a command word starting
	// with one of these letters never reaches the HTTP check.
	switch {
	case len(cmd) == 2 && cmd[0] == 'm':
		return r.parseMeta(w, req)
	case cmd[0] == 'g':
		if len(w) < 2 {
			return errUnknown()
		}
		switch string(cmd) {
		case "get":
			return r.parseGet(mcproto.OpGet, w, req)
		case "gets":
			return r.parseGet(mcproto.OpGets, w, req)
		case "gat":
			return r.parseGat(mcproto.OpGat, w, req)
		case "gats":
			return r.parseGat(mcproto.OpGats, w, req)
		}
		return errUnknown()
	case cmd[0] == 's':
		switch string(cmd) {
		case "set":
			return r.parseStorage(mcproto.OpSet, w, req)
		case "stats":
			return r.parseStats(w, req)
		case "shutdown":
			// memcached's answer when started without -A, noreply or not:
			// a client learns the server will not stop for it.
			return mcproto.ReplyError(MsgShutdownDisabled, false)
		}
		return errUnknown() // slabs: not supported
	case cmd[0] == 'a':
		switch string(cmd) {
		case "add":
			return r.parseStorage(mcproto.OpAdd, w, req)
		case "append":
			return r.parseStorage(mcproto.OpAppend, w, req)
		}
		return errUnknown()
	case cmd[0] == 'c':
		if string(cmd) == "cas" {
			return r.parseStorage(mcproto.OpCas, w, req)
		}
		return errUnknown() // cache_memlimit: not supported
	case cmd[0] == 'i':
		if string(cmd) == "incr" {
			return r.parseArith(mcproto.OpIncr, w, req)
		}
		return errUnknown()
	case cmd[0] == 'd':
		switch string(cmd) {
		case "delete":
			return r.parseDelete(w, req)
		case "decr":
			return r.parseArith(mcproto.OpDecr, w, req)
		}
		return errUnknown()
	case cmd[0] == 't':
		if string(cmd) == "touch" {
			return r.parseTouch(w, req)
		}
		return errUnknown()
	}
	switch string(cmd) {
	case "replace":
		return r.parseStorage(mcproto.OpReplace, w, req)
	case "prepend":
		return r.parseStorage(mcproto.OpPrepend, w, req)
	case "bget": // memcached's ancient alias of get
		if len(w) < 2 {
			return errUnknown()
		}
		return r.parseGet(mcproto.OpGet, w, req)
	case "flush_all":
		return r.parseFlushAll(w, req)
	case "version":
		req.Op = mcproto.OpVersion
		return nil
	case "quit":
		req.Op = mcproto.OpQuit
		return nil
	case "verbosity":
		return r.parseVerbosity(w, req)
	case "lru_crawler", "watch", "lru":
		return errUnknown() // admin commands: not supported
	}
	// An unknown command whose last token (as memcached's tokenizer sees it)
	// starts with "HTTP/" is a browser or proxy: close without a word.
	if last := w[min(len(w), maxTokens)-1]; bytes.HasPrefix(last, []byte("HTTP/")) {
		r.closed = mcproto.CloseError("HTTP request on the memcache port")
		return r.closed
	}
	return errUnknown()
}

// tokenize splits line on spaces into r.words, which it reuses.
func (r *Reader) tokenize(line []byte) [][]byte {
	w := r.words[:0]
	for i := 0; i < len(line); {
		for i < len(line) && line[i] == ' ' {
			i++
		}
		if i == len(line) {
			break
		}
		j := i
		for j < len(line) && line[j] != ' ' {
			j++
		}
		w = append(w, line[i:j])
		i = j
	}
	r.words = w
	return w
}

// noreply reports whether the last token is "noreply", memcached's
// set_noreply_maybe.
func noreply(w [][]byte) bool {
	return string(w[min(len(w), maxTokens)-1]) == "noreply"
}

// checkKeys rejects a key longer than mcproto.MaxKeyLen.
func checkKeys(keys [][]byte) bool {
	for _, k := range keys {
		if len(k) > mcproto.MaxKeyLen {
			return false
		}
	}
	return true
}

func (r *Reader) parseGet(c mcproto.Op, w [][]byte, req *mcproto.Request) error {
	keys := w[1:]
	if !checkKeys(keys) {
		return mcproto.ReplyError(MsgBadCommandLine, false)
	}
	req.Op = c
	req.Keys = keys
	return nil
}

// parseGat handles "gat|gats <exptime> <key>*". memcached accepts zero keys
// and answers END.
func (r *Reader) parseGat(c mcproto.Op, w [][]byte, req *mcproto.Request) error {
	exp, ok := mcproto.ParseInt32(w[1])
	if !ok {
		return mcproto.ReplyError(MsgInvalidExptime, false)
	}
	keys := w[2:]
	if !checkKeys(keys) {
		return mcproto.ReplyError(MsgBadCommandLine, false)
	}
	req.Op = c
	req.Exptime = int64(exp)
	req.Keys = keys
	return nil
}

// parseStorage handles
//
//	set|add|replace|append|prepend <key> <flags> <exptime> <bytes> [noreply]
//	cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]
//
// and reads the data block.
func (r *Reader) parseStorage(c mcproto.Op, w [][]byte, req *mcproto.Request) error {
	base := 5
	if c == mcproto.OpCas {
		base = 6
	}
	if len(w) != base && len(w) != base+1 {
		return errUnknown()
	}
	nr := noreply(w)
	if len(w[1]) > mcproto.MaxKeyLen {
		return mcproto.ReplyError(MsgBadCommandLine, nr)
	}
	flags, ok1 := mcproto.ParseUint32(w[2])
	exp, ok2 := mcproto.ParseInt32(w[3])
	vlen, ok3 := mcproto.ParseInt32(w[4])
	if !ok1 || !ok2 || !ok3 {
		return mcproto.ReplyError(MsgBadCommandLine, nr)
	}
	var cas uint64
	if c == mcproto.OpCas {
		var ok bool
		if cas, ok = mcproto.ParseUint64(w[5]); !ok {
			return mcproto.ReplyError(MsgBadCommandLine, nr)
		}
	}
	if vlen < 0 || vlen > 1<<31-1-2 {
		return mcproto.ReplyError(MsgBadCommandLine, nr)
	}

	// The line is accepted: copy the key out of buf, which the data block
	// may overwrite.
	n := copy(r.key[:], w[1])
	r.keys = append(r.keys[:0], r.key[:n])
	req.Op = c
	req.Keys = r.keys
	req.Flags = flags
	req.Exptime = int64(exp)
	req.CAS = cas
	req.Echo.Noreply = nr

	if int(vlen) > r.lim.MaxItemSize {
		r.skip = int64(vlen) + 2
		e := mcproto.ReplyError(MsgObjectTooLarge, nr)
		e.TooLarge = true
		return e
	}
	block, err := r.readBlock(int(vlen) + 2)
	if err != nil {
		*req = mcproto.Request{}
		return err
	}
	if block[vlen] != '\r' || block[vlen+1] != '\n' {
		e := mcproto.ReplyError(MsgBadDataChunk, nr)
		e.Counted = req.Op
		*req = mcproto.Request{}
		return e
	}
	req.Data = block[:vlen]
	return nil
}

// parseArith handles "incr|decr <key> <delta> [noreply]".
func (r *Reader) parseArith(c mcproto.Op, w [][]byte, req *mcproto.Request) error {
	if len(w) != 3 && len(w) != 4 {
		return errUnknown()
	}
	nr := noreply(w)
	if len(w[1]) > mcproto.MaxKeyLen {
		return mcproto.ReplyError(MsgBadCommandLine, nr)
	}
	delta, ok := mcproto.ParseUint64(w[2])
	if !ok {
		return mcproto.ReplyError(MsgInvalidDelta, nr)
	}
	req.Op = c
	req.Keys = w[1:2]
	req.Delta = delta
	req.Echo.Noreply = nr
	return nil
}

// parseTouch handles "touch <key> <exptime> [noreply]".
func (r *Reader) parseTouch(w [][]byte, req *mcproto.Request) error {
	if len(w) != 3 && len(w) != 4 {
		return errUnknown()
	}
	nr := noreply(w)
	if len(w[1]) > mcproto.MaxKeyLen {
		return mcproto.ReplyError(MsgBadCommandLine, nr)
	}
	exp, ok := mcproto.ParseInt32(w[2])
	if !ok {
		return mcproto.ReplyError(MsgInvalidExptime, nr)
	}
	req.Op = mcproto.OpTouch
	req.Keys = w[1:2]
	req.Exptime = int64(exp)
	req.Echo.Noreply = nr
	return nil
}

// parseDelete handles "delete <key> [0] [noreply]": memcached still accepts
// the obsolete hold time, but only as "0".
func (r *Reader) parseDelete(w [][]byte, req *mcproto.Request) error {
	if len(w) < 2 || len(w) > 4 {
		return errUnknown()
	}
	nr := false
	if len(w) > 2 {
		holdZero := string(w[2]) == "0"
		nr = noreply(w)
		valid := len(w) == 3 && (holdZero || nr) || len(w) == 4 && holdZero && nr
		if !valid {
			return mcproto.ReplyError(MsgDeleteUsage, nr)
		}
	}
	if len(w[1]) > mcproto.MaxKeyLen {
		return mcproto.ReplyError(MsgBadCommandLine, nr)
	}
	req.Op = mcproto.OpDelete
	req.Keys = w[1:2]
	req.Echo.Noreply = nr
	return nil
}

// parseFlushAll handles "flush_all [delay] [noreply]". As in memcached, a
// token after the delay that is not noreply is ignored.
func (r *Reader) parseFlushAll(w [][]byte, req *mcproto.Request) error {
	if len(w) > 3 {
		return errUnknown()
	}
	nr := noreply(w)
	bare := 1
	if nr {
		bare = 2
	}
	if len(w) != bare {
		d, ok := mcproto.ParseInt32(w[1])
		if !ok {
			e := mcproto.ReplyError(MsgInvalidExptime, nr)
			e.Counted = mcproto.OpFlushAll
			return e
		}
		req.Delay = int64(d)
		req.HasDelay = true
	}
	req.Op = mcproto.OpFlushAll
	req.Echo.Noreply = nr
	return nil
}

// parseVerbosity handles "verbosity <level> [noreply]".
func (r *Reader) parseVerbosity(w [][]byte, req *mcproto.Request) error {
	if len(w) != 2 && len(w) != 3 {
		return errUnknown()
	}
	nr := noreply(w)
	level, ok := mcproto.ParseUint32(w[1])
	if !ok {
		return mcproto.ReplyError(MsgBadCommandLine, nr)
	}
	req.Op = mcproto.OpVerbosity
	req.Verbosity = int(level)
	req.Echo.Noreply = nr
	return nil
}

// parseStats handles "stats [args…]"; the server answers each form.
func (r *Reader) parseStats(w [][]byte, req *mcproto.Request) error {
	req.Op = mcproto.OpStats
	if len(w) == 1 {
		return nil
	}
	args := make([]string, len(w)-1) // stats is rare: plain copies
	for i, a := range w[1:] {
		args[i] = string(a)
	}
	req.Args = args
	return nil
}
