package mcproto

import "strconv"

// Command is a memcached text-protocol command. The zero value is not a
// command.
type Command uint8

// The commands the parser recognises. String gives the protocol word.
const (
	CmdGet Command = iota + 1
	CmdGets
	CmdGat
	CmdGats
	CmdSet
	CmdAdd
	CmdReplace
	CmdAppend
	CmdPrepend
	CmdCas
	CmdIncr
	CmdDecr
	CmdTouch
	CmdDelete
	CmdFlushAll
	CmdVersion
	CmdVerbosity
	CmdStats
	CmdQuit
)

var commandWords = [...]string{
	CmdGet:       "get",
	CmdGets:      "gets",
	CmdGat:       "gat",
	CmdGats:      "gats",
	CmdSet:       "set",
	CmdAdd:       "add",
	CmdReplace:   "replace",
	CmdAppend:    "append",
	CmdPrepend:   "prepend",
	CmdCas:       "cas",
	CmdIncr:      "incr",
	CmdDecr:      "decr",
	CmdTouch:     "touch",
	CmdDelete:    "delete",
	CmdFlushAll:  "flush_all",
	CmdVersion:   "version",
	CmdVerbosity: "verbosity",
	CmdStats:     "stats",
	CmdQuit:      "quit",
}

// String returns the protocol word of c ("get", "flush_all", …).
func (c Command) String() string {
	if c > 0 && int(c) < len(commandWords) {
		return commandWords[c]
	}
	return "Command(" + strconv.Itoa(int(c)) + ")"
}

// IsStorage reports whether c carries a data block: set, add, replace,
// append, prepend and cas.
func (c Command) IsStorage() bool {
	return c >= CmdSet && c <= CmdCas
}

// IsRetrieval reports whether c is get, gets, gat or gats, the commands whose
// reply is a list of VALUE blocks ended by END.
func (c Command) IsRetrieval() bool {
	return c >= CmdGet && c <= CmdGats
}

// Request is one parsed request. Next overwrites every field; the byte slices
// alias the Reader's buffers and stay valid only until the next call to Next.
type Request struct {
	Command Command
	// Keys: get and gets carry one or more keys; gat and gats zero or more
	// (memcached answers "gat 10" with a bare END); storage commands, cas,
	// incr, decr, touch and delete exactly one. Every key is 1..250 bytes.
	Keys [][]byte
	// Flags of a storage command, kept verbatim (32-bit).
	Flags uint32
	// Exptime of a storage command, touch, gat or gats, as memcached reads it
	// (a 32-bit signed value: 0, relative seconds, absolute Unix time or
	// negative). Not interpreted here.
	Exptime int64
	// CAS is the compare-and-swap token of cas.
	CAS uint64
	// Delta is the amount of incr or decr.
	Delta uint64
	// Delay is flush_all's optional delay, raw (32-bit signed; memcached
	// treats a value <= 0 as "now"). HasDelay says whether one was given.
	Delay    int64
	HasDelay bool
	// Verbosity is the level of verbosity.
	Verbosity int
	// Args are the words after "stats", copied: they stay valid.
	Args []string
	// Noreply is set when the request ended in "noreply": the server must
	// execute it and send nothing back.
	Noreply bool
	// Data is a storage command's value without its trailing "\r\n".
	Data []byte
}
