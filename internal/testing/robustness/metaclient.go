package robustness

import (
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// metaConn is one memcache connection speaking the meta commands (mg, ms,
// md, ma, mn): the same operations as mcConn, answered in the text
// protocol's words, so that the model checks meta clients' histories
// alike. Every request carries an opaque (O) of its own that its reply must
// echo, and mg asks for the key back (k), so that a reply to another
// request, or about another item, is a protocol violation and never read
// as this request's. A quarter of the writes (ms, md) and reads (mg) are
// quiet (q), followed by mn: the nominal reply (HD, or EN for a miss) is
// then left out, the others are not, and MN closes the exchange. ma is
// never quiet: q would hide the number it returns. After any error the
// connection's state is unknown and the caller closes it.
type metaConn struct {
	conn *mcConn
	// draw returns a number in [0, n): the client's choices (quiet or not,
	// an explicit mode or the default). Tests fix it.
	draw   func(n int) int
	opaque uint64
}

func dialMeta(addr string, timeout time.Duration, seed uint64, sec *Security) (*metaConn, error) {
	c, err := dialMC(addr, timeout, sec)
	if err != nil {
		return nil, err
	}
	return &metaConn{conn: c, draw: rand.New(rand.NewPCG(seed, 0x6d657461)).IntN}, nil
}

func (m *metaConn) Close() error { return m.conn.Close() }

// next returns the opaque flag of the next request.
func (m *metaConn) next() string {
	m.opaque++
	return "O" + strconv.FormatUint(m.opaque, 10)
}

// quiet draws whether the next request is sent with q and followed by mn.
func (m *metaConn) quiet() bool { return m.draw(4) == 0 }

// metaReply is one parsed reply line: its code, VA's length, and its
// return flags by letter (the value after the letter).
type metaReply struct {
	code  string
	size  int
	flags map[byte]string
}

// parseMeta parses l as the reply to verb's request with opaque flag o,
// which may be answered with one of want's codes, carrying exactly the
// return flags want names for that code (O, the opaque, is always
// wanted). Anything else (another code, a missing, repeated or unasked
// flag, another opaque, a doubled space) is a protocol violation.
// CLIENT_ERROR lines are "another code", as they are for mcConn: the
// workload's requests are well formed and its counters always numeric, so
// even memcached's "CLIENT_ERROR cannot increment or decrement non-numeric
// value" is a bug.
func parseMeta(verb, l, o string, want map[string]string) (metaReply, error) {
	bad := func(why string) (metaReply, error) {
		return metaReply{}, fmt.Errorf("%w: %s reply %q: %s", errProtocol, verb, l, why)
	}
	tok := strings.Split(l, " ")
	r := metaReply{code: tok[0], flags: map[byte]string{}}
	flags, ok := want[r.code]
	if !ok {
		return bad("not a reply this request may get")
	}
	tok = tok[1:]
	if r.code == "VA" {
		if len(tok) == 0 {
			return bad("no length")
		}
		n, err := strconv.Atoi(tok[0])
		if err != nil || n < 0 || n > 1<<20 || strconv.Itoa(n) != tok[0] {
			return bad("bad length")
		}
		r.size, tok = n, tok[1:]
	}
	flags += "O"
	for _, t := range tok {
		if t == "" {
			return bad("empty token")
		}
		f := t[0]
		if !strings.ContainsRune(flags, rune(f)) {
			return bad(fmt.Sprintf("unasked flag %q", t))
		}
		if _, dup := r.flags[f]; dup {
			return bad(fmt.Sprintf("flag %c twice", f))
		}
		r.flags[f] = t[1:]
	}
	for _, f := range []byte(flags) {
		if _, ok := r.flags[f]; !ok {
			return bad(fmt.Sprintf("no %c flag", f))
		}
	}
	if "O"+r.flags['O'] != o {
		return bad("the opaque of another request, want " + o)
	}
	return r, nil
}

// reply reads the reply line of verb's request with opaque o; with quiet,
// a bare MN (the mn after the request) stands for the nominal reply, which
// q leaves out, and is returned as code "MN".
func (m *metaConn) reply(verb, o string, quiet bool, want map[string]string) (metaReply, error) {
	l, err := m.conn.line()
	if err != nil {
		return metaReply{}, err
	}
	if quiet && l == "MN" {
		return metaReply{code: "MN"}, nil
	}
	return parseMeta(verb, l, o, want)
}

// endQuiet reads the MN that follows a quiet request's shown reply.
func (m *metaConn) endQuiet(verb string) error {
	l, err := m.conn.line()
	if err != nil {
		return err
	}
	if l != "MN" {
		return fmt.Errorf("%w: %q after a quiet %s's reply, want MN", errProtocol, l, verb)
	}
	return nil
}

// data reads a VA reply's data block of size bytes and its \r\n.
func (m *metaConn) data(verb, key string, size int) (string, error) {
	b := make([]byte, size+2)
	if _, err := io.ReadFull(m.conn.r, b); err != nil {
		return "", fmt.Errorf("read value: %w", err)
	}
	if string(b[size:]) != "\r\n" {
		return "", fmt.Errorf("%w: %s of %q: %d-byte value not followed by \\r\\n", errProtocol, verb, key, size)
	}
	return string(b[:size]), nil
}

// get runs mg with v, f and k (and c for gets). The workload stores
// every item with flags 0 and never makes one stale or hands out a recache
// token, so a W, X or Z on the reply is a bug as well.
func (m *metaConn) get(key string, withCAS bool) (item, error) {
	flags, want := " v f k", "fk"
	if withCAS {
		flags, want = " v f c k", "fck"
	}
	o, quiet := m.next(), m.quiet()
	req := "mg " + key + flags + " " + o
	if quiet {
		req += " q\r\nmn"
	}
	if err := m.conn.exchange(req + "\r\n"); err != nil {
		return item{}, err
	}
	// A miss echoes O and k only.
	r, err := m.reply("mg", o, quiet, map[string]string{"VA": want, "EN": "k"})
	if err != nil {
		return item{}, err
	}
	var it item
	switch r.code {
	case "MN":
		return item{}, nil // a quiet miss: EN left out
	case "EN":
		if quiet {
			return item{}, fmt.Errorf("%w: mg of %q: EN to a quiet mg", errProtocol, key)
		}
		if r.flags['k'] != key {
			return item{}, fmt.Errorf("%w: mg of %q: miss of k%s", errProtocol, key, r.flags['k'])
		}
		return item{}, nil
	}
	if r.flags['f'] != "0" || r.flags['k'] != key {
		return item{}, fmt.Errorf("%w: mg of %q: flags f%s k%s", errProtocol, key, r.flags['f'], r.flags['k'])
	}
	it.Found = true
	if withCAS {
		if it.CAS, err = strconv.ParseUint(r.flags['c'], 10, 64); err != nil {
			return item{}, fmt.Errorf("%w: mg of %q: bad cas c%s", errProtocol, key, r.flags['c'])
		}
	}
	if it.Value, err = m.data("mg", key, r.size); err != nil {
		return item{}, err
	}
	if quiet {
		if err := m.endQuiet("mg"); err != nil {
			return item{}, err
		}
	}
	return it, nil
}

// storeModes maps a store verb to its ms mode flag; set's is drawn between
// the explicit MS and none (S is the default), and cas sends C instead.
var storeModes = map[string]string{"add": " ME", "replace": " MR", "append": " MA", "prepend": " MP"}

// storeWords maps ms's codes to the words of the text protocol's reply to
// verb, for the codes verb may get: a set is always stored, add, replace,
// append and prepend may find the item (not) there, cas may find it
// changed or gone. Any other code is a protocol violation.
func storeWords(verb string) map[string]string {
	switch verb {
	case "set":
		return map[string]string{"HD": "STORED"}
	case "cas":
		return map[string]string{"HD": "STORED", "EX": "EXISTS", "NF": "NOT_FOUND"}
	}
	return map[string]string{"HD": "STORED", "NS": "NOT_STORED"}
}

// store runs ms: set, add, replace, append or prepend through its mode,
// cas through C with token.
func (m *metaConn) store(verb, key, value string, token uint64) (string, error) {
	mode, ok := storeModes[verb]
	switch {
	case verb == "set":
		if m.draw(2) == 0 {
			mode = " MS"
		}
	case verb == "cas":
		mode = " C" + strconv.FormatUint(token, 10)
	case !ok:
		panic("robustness: the meta client has no store verb " + verb)
	}
	o, quiet := m.next(), m.quiet()
	req := fmt.Sprintf("ms %s %d%s %s", key, len(value), mode, o)
	if quiet {
		req += " q"
	}
	req += "\r\n" + value + "\r\n"
	if quiet {
		req += "mn\r\n"
	}
	if err := m.conn.exchange(req); err != nil {
		return "", err
	}
	return m.finish("ms "+verb, o, quiet, storeWords(verb))
}

// finish reads the reply to an ms or md with opaque o, which carries no
// other flag, and returns its word in words; a quiet request's MN alone
// means HD.
func (m *metaConn) finish(verb, o string, quiet bool, words map[string]string) (string, error) {
	want := make(map[string]string, len(words))
	for c := range words {
		want[c] = ""
	}
	r, err := m.reply(verb, o, quiet, want)
	if err != nil {
		return "", err
	}
	if r.code == "MN" {
		return words["HD"], nil
	}
	if quiet {
		if r.code == "HD" {
			return "", fmt.Errorf("%w: %s: HD to a quiet request", errProtocol, verb)
		}
		if err := m.endQuiet(verb); err != nil {
			return "", err
		}
	}
	return words[r.code], nil
}

// delete runs md.
func (m *metaConn) delete(key string) (string, error) {
	o, quiet := m.next(), m.quiet()
	req := "md " + key + " " + o
	if quiet {
		req += " q\r\nmn"
	}
	if err := m.conn.exchange(req + "\r\n"); err != nil {
		return "", err
	}
	return m.finish("md", o, quiet, map[string]string{"HD": "DELETED", "NF": "NOT_FOUND"})
}

// arith runs ma with D and v: the reply is the new value or NOT_FOUND. It
// creates no missing counter (no N), as incr and decr do not.
func (m *metaConn) arith(verb, key string, delta uint64) (string, error) {
	mode := ""
	switch {
	case verb == "decr":
		mode = " MD"
	case m.draw(2) == 0:
		mode = " MI" // incr is the default mode
	}
	o := m.next()
	if err := m.conn.exchange(fmt.Sprintf("ma %s D%d%s v %s\r\n", key, delta, mode, o)); err != nil {
		return "", err
	}
	r, err := m.reply("ma "+verb, o, false, map[string]string{"VA": "", "NF": ""})
	if err != nil {
		return "", err
	}
	if r.code == "NF" {
		return "NOT_FOUND", nil
	}
	v, err := m.data("ma "+verb, key, r.size)
	if err != nil {
		return "", err
	}
	if n, err := strconv.ParseUint(v, 10, 64); err != nil || strconv.FormatUint(n, 10) != v {
		return "", fmt.Errorf("%w: ma %s of %q: value %q is not a number", errProtocol, verb, key, v)
	}
	return v, nil
}

var _ mcClient = (*metaConn)(nil)
