package mcproto

// Error is a protocol error found by a codec's Next. The server writes
// Reply (when it is not empty) and then closes the connection if Close is
// set; otherwise it goes on with the next request.
//
// Reply is empty when memcached answers nothing: the request carried
// noreply, or the connection is closed silently (over-long line, HTTP
// request, a binary header cut short).
type Error struct {
	// Reply is the reply as the codec encodes it, ready to write.
	Reply []byte
	// Close tells the server to close the connection after writing Reply.
	Close bool
	// TooLarge marks a storage request whose value exceeded the item size
	// limit. Next then also fills the Request's Op, Keys, Flags, Exptime,
	// CAS and Echo (not Data): memcached drops the stored item when a set
	// is rejected this way, and the server must do the same.
	TooLarge bool
	// Counted is the operation a rejected request still counts as in the
	// general stats, as memcached counts it, or 0: a storage request whose
	// data block did not end in "\r\n" (cmd_set), a flush_all whose delay
	// is not a number (cmd_flush).
	Counted Op
	// Kind classifies the error for the per-command counters, whether or
	// not a reply was suppressed.
	Kind ErrorKind

	reason string // for Error() when the reply is empty or not self-explanatory
	line   string // the reply line, without its line end, for Error()
}

// ReplyError is an error the text protocol answers with line (without
// "\r\n"), or with nothing when the request asked for noreply; the
// connection stays open.
func ReplyError(line string, noreply bool) *Error {
	e := &Error{Kind: KindOf(line), line: line}
	if noreply {
		e.reason = "suppressed by noreply: " + line
		return e
	}
	e.Reply = append(append(make([]byte, 0, len(line)+2), line...), "\r\n"...)
	return e
}

// CloseError closes the connection without a reply.
func CloseError(reason string) *Error {
	return &Error{Close: true, reason: reason, Kind: KindError}
}

// RawError answers with raw (a reply already encoded) and closes the
// connection when closeConn is set.
func RawError(raw []byte, closeConn bool, kind ErrorKind, reason string) *Error {
	return &Error{Reply: raw, Close: closeConn, Kind: kind, reason: reason}
}

func (e *Error) Error() string {
	switch {
	case e.reason != "":
		if e.Reply != nil && e.line != "" {
			return "mcproto: " + e.reason + ": " + e.line
		}
		return "mcproto: " + e.reason
	default:
		return "mcproto: " + e.line
	}
}

// ErrorKind classifies an error reply. Codecs render each kind in their
// protocol's terms (a line in text and meta, a status in binary).
type ErrorKind uint8

const (
	// KindError is memcached's bare ERROR: a request it does not know.
	KindError ErrorKind = iota
	// KindClient is a request the client got wrong (CLIENT_ERROR).
	KindClient
	// KindServer is a failure of the server (SERVER_ERROR): no quorum,
	// a timeout, an outcome unknown, shutting down.
	KindServer
	// KindBusy: too many requests in flight (a SERVER_ERROR).
	KindBusy
	// KindOutOfMemory: no room to store (memcached's "out of memory
	// storing object").
	KindOutOfMemory
	// KindTooLarge: a value over the item size limit.
	KindTooLarge
	// KindNonNumeric: incr or decr of a value that is not a number.
	KindNonNumeric
	// KindAuth: a request refused because the connection has not
	// authenticated, or a failed authentication. The binary protocol's
	// words are fixed ("Auth failure.", status 0x20); the text
	// protocol's are msg after CLIENT_ERROR, as memcached's -Y words them.
	KindAuth
)

// KindOf classifies a text-protocol error line by its prefix.
func KindOf(line string) ErrorKind {
	switch {
	case len(line) >= 12 && line[:12] == "CLIENT_ERROR":
		return KindClient
	case len(line) >= 12 && line[:12] == "SERVER_ERROR":
		return KindServer
	}
	return KindError
}
