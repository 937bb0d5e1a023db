package mcproto

// MetaFlags is what a meta command's flags ask for, as its parser read and
// checked them. Which flags a command accepts, and what each does, is
// memcached 1.6's doc/protocol.txt; the parser rejects the rest.
type MetaFlags struct {
	// set has one bit per flag letter present ('A'…'Z' then 'a'…'z').
	set uint64
	// Mode is ms's or ma's M token's character (0: none given): ms E A P
	// R S (add, append, prepend, replace, set), ma I + D - (incr, decr).
	Mode byte
	// ClientFlags is F: the flags an ms stores.
	ClientFlags uint32
	// TTL is T, Vivify N and Recache R: exptimes as memcached reads them
	// (32-bit signed; relative seconds up to 30 days, else absolute Unix
	// time; negative is already past), raw.
	TTL     int64
	Vivify  int64
	Recache int64
	// CompareCAS is C: the CAS the item must have.
	CompareCAS uint64
	// NewCAS is E: the CAS the item takes if the command changes it
	// (newer memcached than 1.6.18; see the ascii package doc).
	NewCAS uint64
	// Delta is ma's D (1 when absent) and Initial its J (0 when absent).
	Delta   uint64
	Initial uint64
}

// metaBit maps a flag letter to its bit, or 0 for a byte that is no letter.
func metaBit(flag byte) uint64 {
	switch {
	case flag >= 'A' && flag <= 'Z':
		return 1 << (flag - 'A')
	case flag >= 'a' && flag <= 'z':
		return 1 << (26 + flag - 'a')
	}
	return 0
}

// Has reports whether the flag letter was given.
func (m *MetaFlags) Has(flag byte) bool { return m.set&metaBit(flag) != 0 }

// Set records that the flag letter was given.
func (m *MetaFlags) Set(flag byte) { m.set |= metaBit(flag) }

// MetaEcho is what a meta reply repeats of its request. memcached renders a
// reply's flags by walking the request's flag tokens in order, so the
// tokens are kept as they came.
type MetaEcho struct {
	// Flags are the request's tokens after the key (after ms's length),
	// each as the client wrote it, separated by single spaces: "v c Oab".
	Flags []byte
	// Key is the request's key, decoded when Base64: what k returns
	// (encoded again).
	Key    []byte
	Base64 bool
}

// FlagIndex is the position among e's flag tokens of the first that
// starts with flag, or -1.
func (e *MetaEcho) FlagIndex(flag byte) int {
	b, n := e.Flags, 0
	for len(b) > 0 {
		if b[0] == flag {
			return n
		}
		i := 0
		for i < len(b) && b[i] != ' ' {
			i++
		}
		for i < len(b) && b[i] == ' ' {
			i++
		}
		b, n = b[i:], n+1
	}
	return -1
}

// HasFlag reports whether one of e's flag tokens starts with flag.
func (e *MetaEcho) HasFlag(flag byte) bool { return e.FlagIndex(flag) >= 0 }

// MetaReply is what a meta command's reply is rendered from.
type MetaReply struct {
	// Status is the outcome. mg: StatusHit (VA or HD with the item's
	// flags) or StatusNotFound (EN). ms: StatusStored (HD),
	// StatusNotStored (NS), StatusExists (EX), StatusNotFound (NF). md:
	// StatusDeleted (HD), StatusNotFound, StatusExists, StatusNotStored.
	// ma: StatusHit (HD or VA with the number as the value),
	// StatusNotFound, StatusExists, StatusNotStored. me: StatusHit (the
	// ME line) or StatusNotFound (EN).
	Status Status
	// The item, for StatusHit (and ms's c after StatusStored: CAS).
	Flags uint32
	CAS   uint64
	// Value is mg's value (with v) or ma's number in decimal.
	Value []byte
	// TTL is the seconds the item has left (t), -1 for none.
	TTL int64
	// LastAccess is the seconds since the item was last read or written
	// (l), Fetched whether it was read since it was written (h); both as
	// they were before this request.
	LastAccess int64
	Fetched    bool
	// Won: this request won the right to recache the item (W). Stale: the
	// item is marked stale (X). TokenSent: another request had won it
	// already (Z).
	Won, Stale, TokenSent bool
	// Created: ma created the item (N on a miss). memcached 1.6.18 then
	// answers even under q, which hides only the reply of an item that
	// was there.
	Created bool
	// Ordered: the request had T or N, which memcached applies at their
	// place among the flags, so a t reports TTLBefore (the item's before
	// the request, -1 for none) before them, TTLSet after T, and
	// TTLVivify after N when N created the item.
	Ordered                      bool
	TTLBefore, TTLSet, TTLVivify int64
	// Size is mg's s, the value's length in bytes, and me's size, the
	// bytes the item takes.
	Size int
}

// StatusHit is a meta reply that carries an item (VA, HD, ME): see
// MetaReply.
const StatusHit Status = StatusQuit + 1

// MetaEncoder renders meta replies; the text protocol's codec is one.
type MetaEncoder interface {
	// AppendMeta appends r's reply to the meta request e echoes. Quiet
	// requests (q) drop the replies memcached drops: mg's EN, HD of ms
	// and md, and ma's HD or VA unless it created the item.
	AppendMeta(dst []byte, e Echo, r *MetaReply) []byte
}
