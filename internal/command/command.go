// Package command owns the replicated log format: the bytes of every entry kvd
// proposes to Raft. The log outlives binaries, so the encoding is versioned,
// typed and hand-written (no gob, no JSON, no client-protocol types): byte 0 is
// the format version, byte 1 the operation, then fixed-width header fields and
// length-prefixed payload fields.
//
// The proposer (the kv service, on any node) calls Encode; the state machine
// (fsm, on every node) calls Decode. Both are pure functions.
//
// The package also owns what applying an entry produces (result.go): the
// Result and Status a request waits for, and the Item a read or gat returns.
// fsm produces them, the replica carries them to the waiting request, and
// the kv service and its listeners read them, none of them importing the
// store that made them.
//
// Every node must apply every entry alike, including nodes of a cluster in
// the middle of a rolling upgrade. An entry with a format version or an
// operation a binary does not know fails Decode with ErrUnsupported, and
// that node stops applying rather than skip what its peers apply. So a
// release that adds either must not propose it before every member runs a
// binary that knows it. The same holds for a release that applies an
// existing entry differently. That is what the cluster version is for, as
// etcd has one: each binary applies cluster versions up to ClusterVersionMax,
// the leader raises the replicated cluster version (OpClusterVersion) only
// once every member says it applies the new one, and a behaviour that needs
// version N is used only from the entry that raised the cluster to N on.
//
// Cluster versions:
//
//	1  everything before the gate (a store that never recorded one)
//	2  OpClusterVersion itself; flush_all with an absolute time already
//	   past is a horizon, not a flush of everything
//	3  a delayed flush_all that replaces one whose time has passed keeps
//	   that time in the state (what was stored before it stays hidden,
//	   and the leader's crawl deletes it) instead of deleting those items
//	   in its apply, which read every item
//	4  the conditional and creating writes of the binary protocol (and
//	   meta): OpArith (incr/decr with a CAS to match and an initial value
//	   to create a missing counter with), OpDeleteCAS, OpAppendCAS and
//	   OpPrependCAS
//	5  the meta commands' writes: OpMetaGet, OpMetaStore, OpMetaDelete,
//	   OpMetaArith and OpAccess; and the items whose meta state (fetched,
//	   last access, stale, token sent) they set, which the state machine
//	   stores in a form older binaries do not read
//	6  witnesses: a configuration change that adds a member records in the
//	   member table whether it is a witness or a data member (older
//	   binaries drop those fields when they rewrite a row)
package command

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Version is the envelope format written by this binary. Decode accepts
// exactly the versions it knows how to apply.
const Version byte = 1

// ClusterVersionMax is the highest cluster version this binary applies
// (see the package doc). A new operation, format version or apply rule
// raises it, and is gated on the cluster version reaching it.
const ClusterVersionMax uint64 = 6

// ClusterVersionWitness is the cluster version from which a witness may be
// added online, and from which the member table records members' roles.
const ClusterVersionWitness uint64 = 6

// Op names a state-machine operation.
type Op uint8

// Operations. Values are part of the on-disk format: append only, never renumber.
const (
	OpSet     Op = 1
	OpAdd     Op = 2
	OpReplace Op = 3
	OpAppend  Op = 4
	OpPrepend Op = 5
	OpCAS     Op = 6
	OpIncr    Op = 7
	OpDecr    Op = 8
	OpTouch   Op = 9
	OpDelete  Op = 10
	OpFlush   Op = 11
	// OpGAT touches an item and returns it (memcached gat/gats).
	OpGAT Op = 12
	// OpExpire deletes items the leader found expired, each only if its CAS
	// is unchanged, so a concurrent re-set is never lost.
	OpExpire Op = 13
	// OpMember publishes a member's client-facing addresses into the
	// replicated member table, so every node can name and reach every other
	// (etcd publishes member attributes through its log the same way).
	OpMember Op = 14
	// OpClusterVersion raises the replicated cluster version (never lowers
	// it). Proposed by the leader only once every member applies it.
	OpClusterVersion Op = 15
	// OpArith is incr or decr (Decr) with conditions: the item's CAS must
	// be CAS unless that is 0, and a missing item is created holding
	// Initial, with Exptime, when Create is set (the binary protocol's
	// initial value; meta's vivify). Cluster version 4.
	OpArith Op = 16
	// OpDeleteCAS deletes the item only if its CAS is CAS. Cluster
	// version 4.
	OpDeleteCAS Op = 17
	// OpAppendCAS and OpPrependCAS are append and prepend to an item whose
	// CAS is CAS. Cluster version 4.
	OpAppendCAS  Op = 18
	OpPrependCAS Op = 19
	// The meta commands' writes (cluster version 5). They carry what the
	// meta flags ask for; MetaFlags says which optional fields are set.
	//
	// OpMetaGet is an mg that changes its item: T (new expiry), N
	// (create a missing item, empty, and win it), R (win when the item
	// expires sooner than Recache), and the win token of a stale item.
	OpMetaGet Op = 20
	// OpMetaStore is ms: Mode, C (compare), E (new CAS), I (invalidate:
	// a CAS older than the item's stores the value as stale).
	OpMetaStore Op = 21
	// OpMetaDelete is md: C, E, I (mark stale instead of deleting, with
	// T a new expiry), x (keep the item with an empty value).
	OpMetaDelete Op = 22
	// OpMetaArith is ma: OpArith's fields plus E and T.
	OpMetaArith Op = 23
	// OpAccess marks the listed items read (fetched, last accessed at the
	// entry's stamp), each only if its CAS is unchanged: what meta's h
	// and l report, batched by each node from its reads.
	OpAccess Op = 24
)

// MetaFlags say which of a meta command's optional fields are set, and
// carry its switches.
type MetaFlags uint16

const (
	// MetaHasCAS: CAS is a comparison (C). Needed because C0 is one too.
	MetaHasCAS MetaFlags = 1 << iota
	// MetaHasNewCAS: NewCAS is the CAS the changed item takes (E).
	MetaHasNewCAS
	// MetaHasTTL: Exptime is a new expiry (T).
	MetaHasTTL
	// MetaVivify: create a missing item (N), expiring by Vivify.
	MetaVivify
	// MetaRecache: win when the item expires before Recache (R).
	MetaRecache
	// MetaInvalidate: ms's and md's I.
	MetaInvalidate
	// MetaRemoveValue: md's x.
	MetaRemoveValue
	// MetaWantValue: the result carries the item's value (mg's v).
	MetaWantValue
	// MetaNoBump: the request does not count as an access (mg's u).
	MetaNoBump
	// MetaDecr: ma decrements.
	MetaDecr
	// memcached applies an mg's or ma's flags in the order the client
	// wrote them. MetaVivifyLast: N came after T, so a created item takes
	// N's expiry rather than T's. MetaRecacheAfterTTL: R came after T, so
	// it judges the expiry T has just set.
	MetaVivifyLast
	MetaRecacheAfterTTL
	// MetaKeyBinary: the ms came with a base64 key (b); the item keeps the
	// mark, which decides how k returns its key.
	MetaKeyBinary

	// metaKnown is every bit above: Decode rejects any other.
	metaKnown = MetaKeyBinary<<1 - 1
)

// metaBits is which MetaFlags each meta op carries; Encode writes only
// those, and Decode rejects any other as corrupt.
var metaBits = map[Op]MetaFlags{
	OpMetaGet:    MetaHasTTL | MetaVivify | MetaRecache | MetaHasNewCAS | MetaWantValue | MetaNoBump | MetaVivifyLast | MetaRecacheAfterTTL,
	OpMetaStore:  MetaHasCAS | MetaHasNewCAS | MetaInvalidate | MetaKeyBinary,
	OpMetaDelete: MetaHasCAS | MetaHasNewCAS | MetaHasTTL | MetaInvalidate | MetaRemoveValue,
	OpMetaArith:  MetaHasCAS | MetaHasNewCAS | MetaHasTTL | MetaVivify | MetaDecr | MetaVivifyLast,
}

// Meta store modes (OpMetaStore's Mode), as ms's M token names them.
const (
	ModeSet     byte = 'S'
	ModeAdd     byte = 'E'
	ModeReplace byte = 'R'
	ModeAppend  byte = 'A'
	ModePrepend byte = 'P'
)

// validMode reports whether m is one of the meta store modes.
func validMode(m byte) bool {
	switch m {
	case ModeSet, ModeAdd, ModeReplace, ModeAppend, ModePrepend:
		return true
	}
	return false
}

// MinClusterVersion is the cluster version from which op may be proposed:
// every member applies it from then on (see the package doc).
func MinClusterVersion(op Op) uint64 {
	switch op {
	case OpMetaGet, OpMetaStore, OpMetaDelete, OpMetaArith, OpAccess:
		return 5
	case OpArith, OpDeleteCAS, OpAppendCAS, OpPrependCAS:
		return 4
	case OpClusterVersion:
		return 1
	}
	return 1
}

var opNames = map[Op]string{
	OpSet: "set", OpAdd: "add", OpReplace: "replace", OpAppend: "append", OpPrepend: "prepend",
	OpCAS: "cas", OpIncr: "incr", OpDecr: "decr", OpTouch: "touch", OpDelete: "delete",
	OpFlush: "flush_all", OpGAT: "gat", OpExpire: "expire", OpMember: "member",
	OpClusterVersion: "cluster_version", OpArith: "arith", OpDeleteCAS: "delete_cas",
	OpAppendCAS: "append_cas", OpPrependCAS: "prepend_cas",
	OpMetaGet: "meta_get", OpMetaStore: "meta_store", OpMetaDelete: "meta_delete", OpMetaArith: "meta_arith",
	OpAccess: "access",
}

func (o Op) String() string {
	if n, ok := opNames[o]; ok {
		return n
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// KeyCAS names one item at one version.
type KeyCAS struct {
	Key []byte
	CAS uint64
	// StoredAt (OpAccess only) is the version's stamp too: a CAS alone
	// does not name a version when a client chooses CAS values (meta's
	// E), or when md's x keeps the CAS of the value it removes.
	StoredAt int64
}

// Command is one replicated operation. Which fields matter depends on Op;
// Encode writes only those, Decode fills only those.
type Command struct {
	Op Op
	// ReqID correlates the entry with the proposer's waiting request; unique
	// per proposal across the cluster's lifetime.
	ReqID uint64
	// Stamp is the cluster's time in Unix nanoseconds: the proposer's, then
	// the leader's as it appends the entry (SetStamp). Apply uses it,
	// never its own clock, for every time decision.
	Stamp int64

	Key     []byte
	Value   []byte // set/add/replace/append/prepend/cas, meta store
	Flags   uint32 // set/add/replace/cas, meta store, meta delete with x
	Exptime int64  // set/add/replace/cas/touch/gat, meta store; the other meta ops' T: the client's raw value
	CAS     uint64 // cas, arith, delete_cas, append_cas, prepend_cas, meta's C: the token the client sent
	Delta   uint64 // incr/decr/arith, meta arith
	// Decr, Create and Initial are arith's: a decrement, and whether and
	// with what a missing counter is created (Exptime is then its expiry).
	Decr    bool
	Create  bool
	Initial uint64
	// MaxSize bounds the value append/prepend (and meta store's append and
	// prepend modes) may build, stamped by the proposer so apply never
	// reads configuration.
	MaxSize uint32
	// Delay is flush_all's delay in seconds (0 = now).
	Delay int64
	// Expired lists the items an OpExpire removes.
	Expired []KeyCAS
	// Member is what an OpMember publishes.
	Member MemberAttrs
	// ClusterVersion is what an OpClusterVersion raises the cluster to.
	ClusterVersion uint64
	// MemberTable is, in an OpClusterVersion, the fingerprint of the member
	// table whose members the leader asked (fsm.MemberTableSum; never 0). Apply
	// refuses the raise when the table differs by then: a member added,
	// replaced or moved since was never asked whether it applies the
	// version. 0 (entries written before it existed): not checked.
	MemberTable uint64

	// Meta, Mode, NewCAS, Vivify and Recache are the meta commands' (see
	// OpMetaGet … OpMetaArith): which optional fields are set, ms's mode,
	// E's CAS, N's exptime and R's, raw as the client sent them. Encode
	// writes only the Meta bits its op carries (metaBits) and a Mode of 0
	// as ModeSet; an optional field is written only when its bit is set,
	// and meta arith's Initial only with MetaVivify.
	Meta    MetaFlags
	Mode    byte
	NewCAS  uint64
	Vivify  int64
	Recache int64
	// Accessed lists the items an OpAccess marks read.
	Accessed []KeyCAS
}

// MemberAttrs are a member's addresses as it advertises them.
type MemberAttrs struct {
	ID           uint64
	Name         string
	PeerAddr     string
	HTTPAddr     string
	MemcacheAddr string
}

// MaxAttrLen bounds each MemberAttrs string.
const MaxAttrLen = 1024

// Size limits Decode enforces, so a corrupt entry can never make it allocate
// beyond what a valid one could need.
const (
	MaxKeyLen   = 250
	MaxValueLen = 1 << 30
	MaxExpired  = 1 << 16
)

const headerLen = 2 + 8 + 8

// Encode appends the entry bytes for c to dst.
func Encode(dst []byte, c *Command) ([]byte, error) {
	if _, ok := opNames[c.Op]; !ok {
		return dst, fmt.Errorf("encode command: unknown op %d", c.Op)
	}
	if len(c.Key) > MaxKeyLen {
		return dst, fmt.Errorf("encode %s: key of %d bytes exceeds %d", c.Op, len(c.Key), MaxKeyLen)
	}
	if len(c.Key) == 0 && c.Op != OpFlush && c.Op != OpExpire && c.Op != OpAccess && c.Op != OpMember && c.Op != OpClusterVersion {
		return dst, fmt.Errorf("encode %s: empty key", c.Op)
	}
	// On an error below, dst[:start] is returned: dst as the caller gave
	// it, without a header that no payload follows.
	start := len(dst)
	// One allocation for a key and value, not one per doubling of the
	// buffer as the value is appended: this runs for every write.
	dst = slices.Grow(dst, headerLen+2*binary.MaxVarintLen64+len(c.Key)+len(c.Value)+24)
	dst = append(dst, Version, byte(c.Op))
	dst = binary.BigEndian.AppendUint64(dst, c.ReqID)
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Stamp))
	switch c.Op {
	case OpSet, OpAdd, OpReplace, OpCAS:
		dst = appendBytes(dst, c.Key)
		dst = binary.BigEndian.AppendUint32(dst, c.Flags)
		dst = binary.BigEndian.AppendUint64(dst, uint64(c.Exptime))
		if c.Op == OpCAS {
			dst = binary.BigEndian.AppendUint64(dst, c.CAS)
		}
		dst = appendBytes(dst, c.Value)
	case OpAppend, OpPrepend, OpAppendCAS, OpPrependCAS:
		dst = appendBytes(dst, c.Key)
		dst = binary.BigEndian.AppendUint32(dst, c.MaxSize)
		if c.Op == OpAppendCAS || c.Op == OpPrependCAS {
			dst = binary.BigEndian.AppendUint64(dst, c.CAS)
		}
		dst = appendBytes(dst, c.Value)
	case OpIncr, OpDecr:
		dst = appendBytes(dst, c.Key)
		dst = binary.BigEndian.AppendUint64(dst, c.Delta)
	case OpArith:
		dst = appendBytes(dst, c.Key)
		var fl byte
		if c.Decr {
			fl |= arithDecr
		}
		if c.Create {
			fl |= arithCreate
		}
		dst = append(dst, fl)
		dst = binary.BigEndian.AppendUint64(dst, c.Delta)
		dst = binary.BigEndian.AppendUint64(dst, c.CAS)
		dst = binary.BigEndian.AppendUint64(dst, c.Initial)
		dst = binary.BigEndian.AppendUint64(dst, uint64(c.Exptime))
	case OpDeleteCAS:
		dst = appendBytes(dst, c.Key)
		dst = binary.BigEndian.AppendUint64(dst, c.CAS)
	case OpTouch, OpGAT:
		dst = appendBytes(dst, c.Key)
		dst = binary.BigEndian.AppendUint64(dst, uint64(c.Exptime))
	case OpDelete:
		dst = appendBytes(dst, c.Key)
	case OpFlush:
		dst = binary.BigEndian.AppendUint64(dst, uint64(c.Delay))
	case OpExpire, OpAccess:
		list := c.Expired
		if c.Op == OpAccess {
			list = c.Accessed
		}
		if len(list) > MaxExpired {
			return dst[:start], fmt.Errorf("encode %s: %d items exceeds %d", c.Op, len(list), MaxExpired)
		}
		// Decode rejects an item key it could not apply, so Encode must
		// too: such an entry would be committed and then skipped everywhere.
		for i, kc := range list {
			if len(kc.Key) == 0 || len(kc.Key) > MaxKeyLen {
				return dst[:start], fmt.Errorf("encode %s: item %d: key of %d bytes (want 1 to %d)", c.Op, i, len(kc.Key), MaxKeyLen)
			}
		}
		dst = binary.AppendUvarint(dst, uint64(len(list)))
		for _, kc := range list {
			dst = appendBytes(dst, kc.Key)
			dst = binary.BigEndian.AppendUint64(dst, kc.CAS)
			if c.Op == OpAccess {
				dst = binary.BigEndian.AppendUint64(dst, uint64(kc.StoredAt))
			}
		}
	case OpMetaStore:
		mode := c.Mode
		if mode == 0 {
			mode = ModeSet
		}
		if !validMode(mode) {
			return dst[:start], fmt.Errorf("encode %s: mode %q (want one of S, E, R, A, P)", c.Op, mode)
		}
		m := c.Meta & metaBits[c.Op]
		dst = appendBytes(dst, c.Key)
		dst = binary.BigEndian.AppendUint16(dst, uint16(m))
		dst = append(dst, mode)
		dst = binary.BigEndian.AppendUint32(dst, c.Flags)
		dst = binary.BigEndian.AppendUint64(dst, uint64(c.Exptime))
		if mode == ModeAppend || mode == ModePrepend {
			dst = binary.BigEndian.AppendUint32(dst, c.MaxSize)
		}
		dst = appendIf(dst, m, MetaHasCAS, c.CAS)
		dst = appendIf(dst, m, MetaHasNewCAS, c.NewCAS)
		dst = appendBytes(dst, c.Value)
	case OpMetaDelete:
		m := c.Meta & metaBits[c.Op]
		dst = appendBytes(dst, c.Key)
		dst = binary.BigEndian.AppendUint16(dst, uint16(m))
		dst = appendIf(dst, m, MetaHasCAS, c.CAS)
		dst = appendIf(dst, m, MetaHasNewCAS, c.NewCAS)
		dst = appendIf(dst, m, MetaHasTTL, uint64(c.Exptime))
		if m&MetaRemoveValue != 0 {
			dst = binary.BigEndian.AppendUint32(dst, c.Flags)
		}
	case OpMetaArith:
		m := c.Meta & metaBits[c.Op]
		dst = appendBytes(dst, c.Key)
		dst = binary.BigEndian.AppendUint16(dst, uint16(m))
		dst = binary.BigEndian.AppendUint64(dst, c.Delta)
		dst = appendIf(dst, m, MetaHasCAS, c.CAS)
		dst = appendIf(dst, m, MetaHasNewCAS, c.NewCAS)
		dst = appendIf(dst, m, MetaHasTTL, uint64(c.Exptime))
		dst = appendIf(dst, m, MetaVivify, uint64(c.Vivify))
		dst = appendIf(dst, m, MetaVivify, c.Initial)
	case OpMetaGet:
		m := c.Meta & metaBits[c.Op]
		dst = appendBytes(dst, c.Key)
		dst = binary.BigEndian.AppendUint16(dst, uint16(m))
		dst = appendIf(dst, m, MetaHasNewCAS, c.NewCAS)
		dst = appendIf(dst, m, MetaHasTTL, uint64(c.Exptime))
		dst = appendIf(dst, m, MetaVivify, uint64(c.Vivify))
		dst = appendIf(dst, m, MetaRecache, uint64(c.Recache))
	case OpMember:
		m := &c.Member
		for _, f := range []string{m.Name, m.PeerAddr, m.HTTPAddr, m.MemcacheAddr} {
			if len(f) > MaxAttrLen {
				return dst[:start], fmt.Errorf("encode member: attribute of %d bytes exceeds %d", len(f), MaxAttrLen)
			}
		}
		dst = binary.BigEndian.AppendUint64(dst, m.ID)
		for _, f := range []string{m.Name, m.PeerAddr, m.HTTPAddr, m.MemcacheAddr} {
			dst = appendBytes(dst, []byte(f))
		}
	case OpClusterVersion:
		if c.ClusterVersion < 2 {
			return dst[:start], fmt.Errorf("encode cluster version: %d (the first version it can raise to is 2)", c.ClusterVersion)
		}
		dst = binary.BigEndian.AppendUint64(dst, c.ClusterVersion)
		if c.MemberTable != 0 {
			dst = binary.BigEndian.AppendUint64(dst, c.MemberTable)
		}
	}
	return dst, nil
}

// OpArith's flag bits.
const (
	arithDecr   = 1 << 0
	arithCreate = 1 << 1
	arithKnown  = arithDecr | arithCreate
)

// appendIf appends v when m has bit: a meta command's optional field.
func appendIf(dst []byte, m, bit MetaFlags, v uint64) []byte {
	if m&bit == 0 {
		return dst
	}
	return binary.BigEndian.AppendUint64(dst, v)
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// ErrCorrupt is wrapped by every Decode failure but ErrUnsupported's: bytes
// that no kvd could have written as they are.
var ErrCorrupt = errors.New("corrupt command")

// ErrUnsupported is wrapped by Decode when an entry names a format version
// or an operation this binary does not know: a newer kvd wrote it. Unlike
// a corrupt entry, which every node rejects alike, such an entry is applied
// by the nodes that know it, so one that does not must not skip it (fsm
// stops applying instead).
var ErrUnsupported = errors.New("command written by a newer kvd")

// PeekOp returns the operation of an entry without decoding the rest; ok is
// false for an entry Decode would refuse at its header.
func PeekOp(data []byte) (op Op, ok bool) {
	if len(data) < headerLen || data[0] == 0 || data[0] > Version {
		return 0, false
	}
	op = Op(data[1])
	_, ok = opNames[op]
	return op, ok
}

// StampOf returns the stamp of entry bytes data without decoding the rest,
// and false for bytes whose header Decode would refuse.
func StampOf(data []byte) (int64, bool) {
	if _, ok := PeekOp(data); !ok {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(data[10:])), true
}

// SetStamp overwrites the stamp of entry bytes data in place: the leader's
// clock replaces the proposer's (package clusterclock). It reports false,
// leaving data alone, for bytes whose header Decode would refuse.
func SetStamp(data []byte, stamp int64) bool {
	if _, ok := PeekOp(data); !ok {
		return false
	}
	binary.BigEndian.PutUint64(data[10:], uint64(stamp))
	return true
}

// Decode parses entry bytes into c. Key, Value, Expired and Accessed keys alias data, so
// data must stay unmodified while c is in use.
func Decode(data []byte, c *Command) error {
	*c = Command{}
	// The version before the length: a newer format may have a shorter
	// header, and its entries must stop this node, not be skipped as corrupt.
	switch {
	case len(data) == 0:
		return fmt.Errorf("%w: empty entry", ErrCorrupt)
	case data[0] == 0:
		return fmt.Errorf("%w: format version 0", ErrCorrupt)
	case data[0] > Version:
		return fmt.Errorf("%w: format version %d, this binary knows up to %d", ErrUnsupported, data[0], Version)
	case len(data) < headerLen:
		return fmt.Errorf("%w: %d bytes is shorter than the header", ErrCorrupt, len(data))
	}
	// The request ID first: whatever is wrong further on, the proposer can
	// be told at once that its entry did nothing (see fsm's Apply).
	c.ReqID = binary.BigEndian.Uint64(data[2:])
	c.Stamp = int64(binary.BigEndian.Uint64(data[10:]))
	c.Op = Op(data[1])
	if _, ok := opNames[c.Op]; !ok {
		if c.Op == 0 {
			return fmt.Errorf("%w: operation 0", ErrCorrupt) // numbering starts at 1
		}
		return fmt.Errorf("%w: operation %d", ErrUnsupported, data[1])
	}
	d := decoder{b: data[headerLen:]}
	switch c.Op {
	case OpSet, OpAdd, OpReplace, OpCAS:
		c.Key = d.key()
		c.Flags = d.u32()
		c.Exptime = int64(d.u64())
		if c.Op == OpCAS {
			c.CAS = d.u64()
		}
		c.Value = d.bytes(MaxValueLen)
	case OpAppend, OpPrepend, OpAppendCAS, OpPrependCAS:
		c.Key = d.key()
		c.MaxSize = d.u32()
		if c.Op == OpAppendCAS || c.Op == OpPrependCAS {
			c.CAS = d.u64()
		}
		c.Value = d.bytes(MaxValueLen)
	case OpIncr, OpDecr:
		c.Key = d.key()
		c.Delta = d.u64()
	case OpArith:
		c.Key = d.key()
		fl := d.u8()
		if d.err == nil && fl&^arithKnown != 0 {
			return fmt.Errorf("%w: arith flags %#x", ErrCorrupt, fl)
		}
		c.Decr, c.Create = fl&arithDecr != 0, fl&arithCreate != 0
		c.Delta = d.u64()
		c.CAS = d.u64()
		c.Initial = d.u64()
		c.Exptime = int64(d.u64())
	case OpDeleteCAS:
		c.Key = d.key()
		c.CAS = d.u64()
	case OpTouch, OpGAT:
		c.Key = d.key()
		c.Exptime = int64(d.u64())
	case OpDelete:
		c.Key = d.key()
	case OpFlush:
		c.Delay = int64(d.u64())
	case OpExpire, OpAccess:
		n := d.uvarint()
		if n > MaxExpired {
			return fmt.Errorf("%w: %s of %d items", ErrCorrupt, c.Op, n)
		}
		list := make([]KeyCAS, 0, min(n, uint64(len(d.b))))
		for i := uint64(0); i < n && d.err == nil; i++ {
			kc := KeyCAS{Key: d.key(), CAS: d.u64()}
			if c.Op == OpAccess {
				kc.StoredAt = int64(d.u64())
			}
			list = append(list, kc)
		}
		if c.Op == OpAccess {
			c.Accessed = list
		} else {
			c.Expired = list
		}
	case OpMetaGet, OpMetaStore, OpMetaDelete, OpMetaArith:
		c.Key = d.key()
		m := MetaFlags(d.u16())
		if d.err == nil && m&^metaBits[c.Op] != 0 {
			return fmt.Errorf("%w: %s: meta flags %#x", ErrCorrupt, c.Op, uint16(m))
		}
		c.Meta = m
		switch c.Op {
		case OpMetaStore:
			c.Mode = d.u8()
			if d.err == nil && !validMode(c.Mode) {
				return fmt.Errorf("%w: %s: mode %#x", ErrCorrupt, c.Op, c.Mode)
			}
			c.Flags = d.u32()
			c.Exptime = int64(d.u64())
			if c.Mode == ModeAppend || c.Mode == ModePrepend {
				c.MaxSize = d.u32()
			}
			c.CAS = d.optU64(m, MetaHasCAS)
			c.NewCAS = d.optU64(m, MetaHasNewCAS)
			c.Value = d.bytes(MaxValueLen)
		case OpMetaDelete:
			c.CAS = d.optU64(m, MetaHasCAS)
			c.NewCAS = d.optU64(m, MetaHasNewCAS)
			c.Exptime = int64(d.optU64(m, MetaHasTTL))
			if m&MetaRemoveValue != 0 {
				c.Flags = d.u32()
			}
		case OpMetaArith:
			c.Delta = d.u64()
			c.CAS = d.optU64(m, MetaHasCAS)
			c.NewCAS = d.optU64(m, MetaHasNewCAS)
			c.Exptime = int64(d.optU64(m, MetaHasTTL))
			c.Vivify = int64(d.optU64(m, MetaVivify))
			c.Initial = d.optU64(m, MetaVivify)
		case OpMetaGet:
			c.NewCAS = d.optU64(m, MetaHasNewCAS)
			c.Exptime = int64(d.optU64(m, MetaHasTTL))
			c.Vivify = int64(d.optU64(m, MetaVivify))
			c.Recache = int64(d.optU64(m, MetaRecache))
		}
	case OpMember:
		m := &c.Member
		m.ID = d.u64()
		m.Name = string(d.bytes(MaxAttrLen))
		m.PeerAddr = string(d.bytes(MaxAttrLen))
		m.HTTPAddr = string(d.bytes(MaxAttrLen))
		m.MemcacheAddr = string(d.bytes(MaxAttrLen))
	case OpClusterVersion:
		c.ClusterVersion = d.u64()
		if d.err == nil && c.ClusterVersion < 2 {
			return fmt.Errorf("%w: cluster version %d", ErrCorrupt, c.ClusterVersion)
		}
		if len(d.b) != 0 { // absent from the first such entries
			c.MemberTable = d.u64()
			if d.err == nil && c.MemberTable == 0 {
				return fmt.Errorf("%w: cluster version: member table fingerprint 0", ErrCorrupt)
			}
		}
	}
	if d.err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, c.Op, d.err)
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %s: %d trailing bytes", ErrCorrupt, c.Op, len(d.b))
	}
	return nil
}

// Describe renders c for logs and debugging tools, without values.
func Describe(c *Command) string {
	switch c.Op {
	case OpFlush:
		return fmt.Sprintf("%s delay=%d req=%x", c.Op, c.Delay, c.ReqID)
	case OpExpire:
		return fmt.Sprintf("%s items=%d req=%x", c.Op, len(c.Expired), c.ReqID)
	case OpAccess:
		return fmt.Sprintf("%s items=%d req=%x", c.Op, len(c.Accessed), c.ReqID)
	case OpMetaStore:
		return fmt.Sprintf("%s key=%q mode=%q meta=%#x value=%dB req=%x", c.Op, c.Key, c.Mode, uint16(c.Meta), len(c.Value), c.ReqID)
	case OpMetaGet, OpMetaDelete, OpMetaArith:
		return fmt.Sprintf("%s key=%q meta=%#x req=%x", c.Op, c.Key, uint16(c.Meta), c.ReqID)
	case OpMember:
		return fmt.Sprintf("%s id=%x name=%q req=%x", c.Op, c.Member.ID, c.Member.Name, c.ReqID)
	case OpClusterVersion:
		return fmt.Sprintf("%s %d members=%x req=%x", c.Op, c.ClusterVersion, c.MemberTable, c.ReqID)
	default:
		return fmt.Sprintf("%s key=%q value=%dB req=%x", c.Op, c.Key, len(c.Value), c.ReqID)
	}
}

// decoder reads fields, remembering the first error so call sites stay flat.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("truncated %s", what)
	}
	d.b = nil
}

func (d *decoder) u8() byte {
	if len(d.b) < 1 {
		d.fail("u8")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) u16() uint16 {
	if len(d.b) < 2 {
		d.fail("u16")
		return 0
	}
	v := binary.BigEndian.Uint16(d.b)
	d.b = d.b[2:]
	return v
}

// optU64 reads a meta command's optional field, present when m has bit.
func (d *decoder) optU64(m, bit MetaFlags) uint64 {
	if m&bit == 0 {
		return 0
	}
	return d.u64()
}

func (d *decoder) u32() uint32 {
	if len(d.b) < 4 {
		d.fail("u32")
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) u64() uint64 {
	if len(d.b) < 8 {
		d.fail("u64")
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	// A varint whose last byte is zero (after at least one continuation
	// byte) is a longer spelling of a smaller number; the format has exactly
	// one spelling per command, so such an encoding is corrupt.
	if n <= 0 || (n > 1 && d.b[n-1] == 0) {
		d.fail("length")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes(limit uint64) []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > limit || n > uint64(len(d.b)) {
		d.fail("bytes")
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) key() []byte {
	k := d.bytes(MaxKeyLen)
	if d.err == nil && len(k) == 0 {
		d.err = errors.New("empty key")
	}
	return k
}
