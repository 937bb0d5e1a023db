package mcproto

import "strconv"

// Op is a memcache operation, whichever protocol asked for it. The zero
// value is not an operation; where a count is kept per Op, index 0 stands
// for a request no codec could read (memcached's "unknown command").
type Op uint8

// The operations. String gives the text protocol's word for each, which is
// also the name kvd's metrics use.
const (
	OpGet Op = iota + 1
	OpGets
	OpGat
	OpGats
	OpSet
	OpAdd
	OpReplace
	OpAppend
	OpPrepend
	OpCas
	OpIncr
	OpDecr
	OpTouch
	OpDelete
	OpFlushAll
	OpVersion
	OpVerbosity
	OpStats
	OpQuit
	// OpNoop does nothing and answers: the binary protocol's Noop and
	// meta's mn, which end a batch of quiet requests.
	OpNoop
	// The binary protocol's SASL exchange: list the mechanisms,
	// authenticate (Keys[0] the mechanism, Data the client's data), and a
	// further step.
	OpSASLList
	OpSASLAuth
	OpSASLStep
	// The meta commands: mg, ms, md and ma (Request.Meta holds their
	// flags; ms's mode and ma's are there too), and me, meta's debug
	// dump of an item. mn is OpNoop.
	OpMetaGet
	OpMetaSet
	OpMetaDelete
	OpMetaArith
	OpMetaDebug
	// NumOps sizes arrays indexed by Op.
	NumOps
)

var opWords = [...]string{
	OpGet:        "get",
	OpGets:       "gets",
	OpGat:        "gat",
	OpGats:       "gats",
	OpSet:        "set",
	OpAdd:        "add",
	OpReplace:    "replace",
	OpAppend:     "append",
	OpPrepend:    "prepend",
	OpCas:        "cas",
	OpIncr:       "incr",
	OpDecr:       "decr",
	OpTouch:      "touch",
	OpDelete:     "delete",
	OpFlushAll:   "flush_all",
	OpVersion:    "version",
	OpVerbosity:  "verbosity",
	OpStats:      "stats",
	OpQuit:       "quit",
	OpNoop:       "noop",
	OpSASLList:   "sasl_list_mechs",
	OpSASLAuth:   "sasl_auth",
	OpSASLStep:   "sasl_step",
	OpMetaGet:    "mg",
	OpMetaSet:    "ms",
	OpMetaDelete: "md",
	OpMetaArith:  "ma",
	OpMetaDebug:  "me",
}

// String returns the text protocol's word for o ("get", "flush_all", …).
func (o Op) String() string {
	if o > 0 && int(o) < len(opWords) {
		return opWords[o]
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// IsStorage reports whether o carries a value: set, add, replace, append,
// prepend and cas.
func (o Op) IsStorage() bool {
	return o >= OpSet && o <= OpCas
}

// IsRetrieval reports whether o is get, gets, gat or gats, the operations
// that answer a list of hits.
func (o Op) IsRetrieval() bool {
	return o >= OpGet && o <= OpGats
}

// Proto names the protocol a request came in. Text and meta share a
// connection (and a codec); binary has connections of its own.
type Proto uint8

const (
	// Text is memcached's classic text protocol ("get", "set", …).
	Text Proto = iota
	// Meta is the text protocol's meta commands ("mg", "ms", …).
	Meta
	// Binary is memcached's binary protocol.
	Binary
)

// Request is one decoded request. A codec's Next overwrites every field;
// the byte slices alias the codec's buffers and stay valid only until the
// next call to Next.
type Request struct {
	Op Op
	// Keys: get and gets carry one or more keys; gat and gats zero or more
	// (memcached answers "gat 10" with a bare END); storage operations,
	// cas, incr, decr, touch and delete exactly one. Every key is 1..250
	// bytes.
	Keys [][]byte
	// Flags of a storage operation, kept verbatim (32-bit).
	Flags uint32
	// Exptime of a storage operation, touch, gat or gats, as memcached
	// reads it: in text and meta a 32-bit signed value (0, relative
	// seconds, absolute Unix time or negative), in binary an unsigned
	// 32-bit one, never negative. Not interpreted here.
	Exptime int64
	// CAS is the compare-and-swap token of cas. In the binary protocol a
	// non-zero CAS also makes append, prepend, delete, incr and decr
	// conditional: memcached then answers "exists" unless it is the
	// item's (0 is no condition).
	CAS uint64
	// Delta is the amount of incr or decr.
	Delta uint64
	// Initial is the value incr or decr stores when the key is missing and
	// Create is set (the binary protocol's initial value, meta's N flag);
	// Exptime is then the new item's.
	Initial uint64
	Create  bool
	// Delay is flush_all's optional delay, raw (32-bit signed; memcached
	// treats a value <= 0 as "now"; the binary protocol's is unsigned).
	// HasDelay says whether one was given.
	Delay    int64
	HasDelay bool
	// Verbosity is the level of verbosity.
	Verbosity int
	// Args are the words after "stats", copied: they stay valid.
	Args []string
	// Data is a storage operation's value (without the text protocol's
	// trailing "\r\n").
	Data []byte
	// Meta is a meta command's flags (OpMetaGet … OpMetaDebug); zero for
	// every other request.
	Meta MetaFlags
	// Echo is what the reply needs from the request.
	Echo Echo
}

// Echo is the part of a request its reply is rendered from: the protocol,
// the operation and whether the client asked for silence. It is a small
// value, copied into the reply when the request is handled, because a reply
// is rendered after the codec has moved on to later requests.
type Echo struct {
	Proto Proto
	Op    Op
	// Noreply: the client asked for no reply (the text protocol's
	// "noreply"). What that suppresses is the codec's to decide.
	Noreply bool
	// Quiet: the client asked to hear only what matters (a binary quiet
	// opcode, meta's q flag): misses and successes are dropped, errors
	// are not. The codec decides which is which.
	Quiet bool
	// Opcode is the binary protocol's opcode of the request, which its
	// response repeats (GetK and Get differ only there).
	Opcode uint8
	// Opaque is the binary protocol's opaque value, echoed.
	Opaque uint32
	// Meta is what a meta reply repeats of its request (nil for every
	// other protocol): its flag tokens, in the client's order, and its key.
	Meta *MetaEcho
}
