package binary

import "github.com/kvd-project/kvd/internal/mcproto"

// HeaderLen is the length of every request and response header.
const HeaderLen = 24

// Magic bytes: the first byte of every request and of every response.
const (
	RequestMagic  = mcproto.BinaryMagic // 0x80
	ResponseMagic = 0x81
)

// Opcodes memcached 1.6.18 answers (protocol_binary.h), with the quiet
// variants. Verbosity (0x1b) is missing on purpose: 1.6.18 answers it
// "Unknown command" like any opcode it does not know.
const (
	OpcodeGet        = 0x00
	OpcodeSet        = 0x01
	OpcodeAdd        = 0x02
	OpcodeReplace    = 0x03
	OpcodeDelete     = 0x04
	OpcodeIncrement  = 0x05
	OpcodeDecrement  = 0x06
	OpcodeQuit       = 0x07
	OpcodeFlush      = 0x08
	OpcodeGetQ       = 0x09
	OpcodeNoop       = 0x0a
	OpcodeVersion    = 0x0b
	OpcodeGetK       = 0x0c
	OpcodeGetKQ      = 0x0d
	OpcodeAppend     = 0x0e
	OpcodePrepend    = 0x0f
	OpcodeStat       = 0x10
	OpcodeSetQ       = 0x11
	OpcodeAddQ       = 0x12
	OpcodeReplaceQ   = 0x13
	OpcodeDeleteQ    = 0x14
	OpcodeIncrementQ = 0x15
	OpcodeDecrementQ = 0x16
	OpcodeQuitQ      = 0x17
	OpcodeFlushQ     = 0x18
	OpcodeAppendQ    = 0x19
	OpcodePrependQ   = 0x1a
	OpcodeTouch      = 0x1c
	OpcodeGAT        = 0x1d
	OpcodeGATQ       = 0x1e
	OpcodeSASLList   = 0x20
	OpcodeSASLAuth   = 0x21
	OpcodeSASLStep   = 0x22
	OpcodeGATK       = 0x23
	OpcodeGATKQ      = 0x24
)

// Status is a response's status field.
type Status uint16

// The statuses kvd sends. memcached 1.6.18 sends all but the last three,
// which come from the protocol's later revisions (see AppendError).
const (
	StatusSuccess          Status = 0x0000
	StatusKeyNotFound      Status = 0x0001
	StatusKeyExists        Status = 0x0002
	StatusTooLarge         Status = 0x0003
	StatusInvalidArguments Status = 0x0004
	StatusNotStored        Status = 0x0005
	StatusNonNumeric       Status = 0x0006
	StatusAuthError        Status = 0x0020
	StatusUnknownCommand   Status = 0x0081
	StatusOutOfMemory      Status = 0x0082
	StatusInternalError    Status = 0x0084
	StatusBusy             Status = 0x0085
	StatusTemporaryFailure Status = 0x0086
)

// The bodies of error responses, as memcached 1.6.18 words them
// (write_bin_error and the out_of_memory calls of proto_bin.c), checked
// against the real server.
const (
	MsgNotFound         = "Not found"
	MsgExists           = "Data exists for key."
	MsgTooLarge         = "Too large."
	MsgInvalidArguments = "Invalid arguments"
	MsgNotStored        = "Not stored."
	MsgNonNumeric       = "Non-numeric server-side value for incr or decr"
	MsgUnknownCommand   = "Unknown command"
	MsgAuthFailure      = "Auth failure."
	MsgOutOfMemoryStore = "Out of memory allocating item"
	MsgOutOfMemoryIncr  = "Out of memory incrementing value"
	// kvd's own, for the kinds memcached never sends.
	MsgInternalError    = "Internal error"
	MsgBusy             = "Busy"
	MsgTemporaryFailure = "Temporary failure"
)

// opcodeInfo is what the decoder knows of an opcode: the neutral operation
// it names (0: unknown), whether it is a quiet variant, and the shape its
// body must have.
type opcodeInfo struct {
	op    mcproto.Op
	quiet bool
	shape shape
}

// shape is the body an opcode takes, as dispatch_bin_command in
// memcached 1.6.18's proto_bin.c checks it; a body of another shape is a
// protocol error ("Invalid arguments", then the connection closes).
type shape uint8

const (
	shapeNone     shape = iota + 1 // no extras, key or value (Noop, Version, Quit, SASL list)
	shapeGet                       // a key and nothing else
	shapeStore                     // 8 bytes of extras (flags, expiration), a key, a value
	shapeConcat                    // a key and a value, no extras (Append, Prepend)
	shapeDelete                    // a key and nothing else
	shapeArith                     // 20 bytes of extras (delta, initial, expiration), a key
	shapeFlush                     // optional 4 bytes of extras (delay), nothing else
	shapeStat                      // no extras; an optional key
	shapeTouch                     // 4 bytes of extras (expiration), a key
	shapeSASLData                  // no extras, a key (the mechanism), a value
)

var opcodes = [256]opcodeInfo{
	OpcodeGet:        {mcproto.OpGet, false, shapeGet},
	OpcodeGetQ:       {mcproto.OpGet, true, shapeGet},
	OpcodeGetK:       {mcproto.OpGet, false, shapeGet},
	OpcodeGetKQ:      {mcproto.OpGet, true, shapeGet},
	OpcodeSet:        {mcproto.OpSet, false, shapeStore},
	OpcodeSetQ:       {mcproto.OpSet, true, shapeStore},
	OpcodeAdd:        {mcproto.OpAdd, false, shapeStore},
	OpcodeAddQ:       {mcproto.OpAdd, true, shapeStore},
	OpcodeReplace:    {mcproto.OpReplace, false, shapeStore},
	OpcodeReplaceQ:   {mcproto.OpReplace, true, shapeStore},
	OpcodeAppend:     {mcproto.OpAppend, false, shapeConcat},
	OpcodeAppendQ:    {mcproto.OpAppend, true, shapeConcat},
	OpcodePrepend:    {mcproto.OpPrepend, false, shapeConcat},
	OpcodePrependQ:   {mcproto.OpPrepend, true, shapeConcat},
	OpcodeDelete:     {mcproto.OpDelete, false, shapeDelete},
	OpcodeDeleteQ:    {mcproto.OpDelete, true, shapeDelete},
	OpcodeIncrement:  {mcproto.OpIncr, false, shapeArith},
	OpcodeIncrementQ: {mcproto.OpIncr, true, shapeArith},
	OpcodeDecrement:  {mcproto.OpDecr, false, shapeArith},
	OpcodeDecrementQ: {mcproto.OpDecr, true, shapeArith},
	OpcodeQuit:       {mcproto.OpQuit, false, shapeNone},
	OpcodeQuitQ:      {mcproto.OpQuit, true, shapeNone},
	OpcodeFlush:      {mcproto.OpFlushAll, false, shapeFlush},
	OpcodeFlushQ:     {mcproto.OpFlushAll, true, shapeFlush},
	OpcodeNoop:       {mcproto.OpNoop, false, shapeNone},
	OpcodeVersion:    {mcproto.OpVersion, false, shapeNone},
	OpcodeStat:       {mcproto.OpStats, false, shapeStat},
	OpcodeTouch:      {mcproto.OpTouch, false, shapeTouch},
	OpcodeGAT:        {mcproto.OpGat, false, shapeTouch},
	OpcodeGATQ:       {mcproto.OpGat, true, shapeTouch},
	OpcodeGATK:       {mcproto.OpGat, false, shapeTouch},
	OpcodeGATKQ:      {mcproto.OpGat, true, shapeTouch},
	OpcodeSASLList:   {mcproto.OpSASLList, false, shapeNone},
	OpcodeSASLAuth:   {mcproto.OpSASLAuth, false, shapeSASLData},
	OpcodeSASLStep:   {mcproto.OpSASLStep, false, shapeSASLData},
}

// returnsKey reports whether an opcode's responses carry the key: GetK,
// GetKQ, GATK and GATKQ.
func returnsKey(opcode uint8) bool {
	switch opcode {
	case OpcodeGetK, OpcodeGetKQ, OpcodeGATK, OpcodeGATKQ:
		return true
	}
	return false
}
