package command

import (
	"math"
	"strconv"
)

// This file is the other half of the log's vocabulary: what applying an
// entry produced. It lives beside the format, not in the state machine, so
// that the replica can carry results typed from apply to the waiting
// request, and the kv service and its listeners can read them, without any
// of them importing the store that produced them.

// Status is the outcome of one applied command, in memcached's vocabulary.
type Status uint8

const (
	// StatusNone: the entry carried no command (a raft no-op or already applied).
	StatusNone Status = iota
	StatusStored
	StatusNotStored
	StatusExists
	StatusNotFound
	StatusDeleted
	StatusTouched
	StatusOK
	// StatusValue: incr/decr succeeded; Result.Value holds the new number.
	StatusValue
	// StatusHit: gat found the item; Result.Item holds it.
	StatusHit
	// StatusNonNumeric: incr/decr on a value that is not a decimal number.
	StatusNonNumeric
	// StatusTooLarge: append/prepend would exceed the item size limit.
	StatusTooLarge
	// StatusInvalid: the entry is corrupt (ErrCorrupt); every node skips it
	// alike.
	StatusInvalid
)

var statusNames = [...]string{"none", "stored", "not_stored", "exists", "not_found", "deleted",
	"touched", "ok", "value", "hit", "non_numeric", "too_large", "invalid"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// Result is what applying one entry produced, for the request that proposed it.
type Result struct {
	// ReqID is the proposing request's Command.ReqID (0: none, or an entry
	// that was not a command).
	ReqID  uint64
	Status Status
	Value  uint64 // StatusValue
	Item   Item   // StatusHit; Value is a private copy
	// CAS (StatusStored) is the stored item's CAS token, so a writer can
	// make its next write conditional without reading the item back; 0
	// when the item was stored already expired, as no read will see it.
	CAS uint64
	// Grew (StatusValue): the counter's digits outgrew the old value, where
	// memcached stores a new item rather than rewrite it in place, and
	// counts it in total_items.
	Grew bool
	// Created (StatusValue of OpArith): the counter was missing and has
	// been created at its initial value, a new item (total_items) that is
	// neither a hit nor a miss.
	Created bool
	// Won (OpMetaGet): this request won the item's recache token, which
	// no other request had (meta's W). HadToken: another request had won
	// it before (Z).
	Won, HadToken bool
	// PrevExpiresAt (OpMetaGet, OpMetaArith) is the item's expiry before
	// the command (0: none, or the item was created): what a t written
	// before the request's T reports.
	PrevExpiresAt int64
}

// Item is one stored value as clients see it: what a read returns and what
// gat hands back in a Result. The state machine stores it in a form of its
// own.
type Item struct {
	Flags uint32
	// ExpiresAt is when the item goes (Unix ns; 0 means never): it is
	// visible before that instant and gone from it on.
	ExpiresAt int64
	// CAS is the raft index of the entry that last changed the value, so every
	// node hands out the same token and tokens survive failover and restart.
	CAS uint64
	// StoredAt is the stamp (Unix ns) of the entry that last changed the value;
	// a delayed flush_all hides items stored before its horizon.
	StoredAt int64
	Value    []byte
	// The meta protocol's item state (all zero for an item no meta
	// command touched, which the store keeps in its older, shorter form).
	// Fetched: read since it was stored (h); AccessedAt: the stamp (Unix
	// ns) of its last read or write, 0 meaning StoredAt (l); Stale: marked
	// stale by md I or ms I (X); TokenSent: a request has won its recache
	// token (Z to the others).
	Fetched    bool
	AccessedAt int64
	Stale      bool
	TokenSent  bool
	// KeyBinary: an ms with b stored it, so meta's k returns its key in
	// base64 (memcached keeps the same mark).
	KeyBinary bool
}

// ExpirySec is the first whole Unix second at which the item is gone (0:
// never), as memcached and the state machine's expiry index count.
func (it *Item) ExpirySec() int64 {
	sec := it.ExpiresAt / 1e9
	if it.ExpiresAt%1e9 > 0 {
		sec++ // never overflows: ns/1e9 is far below MaxInt64
	}
	return sec
}

// ScanItem is one item as a listing returns it: its key and metadata. The
// value is not copied (a listing of a thousand 1 MiB items must not hold a
// gigabyte); a read of the key returns it.
type ScanItem struct {
	Key   []byte
	Flags uint32
	// Expiry is the first Unix second at which the item is gone; 0 means
	// never.
	Expiry int64
	// CAS is the item's CAS token (the raft index that last changed it).
	CAS uint64
	// Size is the value's length in bytes.
	Size int
}

// ExpiryOf turns memcached's exptime into the instant an item written at
// stampNs goes (Unix ns): 0 never expires, up to 30 days is relative,
// larger is an absolute Unix time, negative is already expired. A relative
// exptime counts from the write's own stamp, to the nanosecond: the item is
// retrievable for exactly that long and not after, where memcached, which
// counts from its current whole second, may drop it up to a second early.
// With a durable write's latency added to that second, a client touching a
// 2-second item every second would lose it now and then. The state machine
// applies it to every write's stamp; the meta protocol's replies use it to
// report what a T or N about to apply will leave.
func ExpiryOf(exptime, stampNs int64) int64 {
	const maxRelative = 60 * 60 * 24 * 30
	switch {
	case exptime == 0:
		return 0
	case exptime < 0:
		return 1
	case exptime <= maxRelative:
		return stampNs + exptime*1e9
	case exptime > math.MaxInt64/int64(1e9):
		// Past the year 2262, where Unix ns end (the HTTP API takes any
		// 64-bit ttl): as good as never, but still an expiry.
		return math.MaxInt64
	default:
		return exptime * 1e9
	}
}
