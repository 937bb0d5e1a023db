package mcproto

// Error is a protocol error found by Reader.Next. The server writes Reply
// (when it is not empty) followed by "\r\n", and then closes the connection
// if Close is set; otherwise it goes on with the next request.
//
// Reply is empty when memcached answers nothing: the request carried
// noreply, or the connection is closed silently (over-long line, HTTP
// request).
type Error struct {
	// Reply is the full reply line without "\r\n", e.g. "ERROR" or
	// "CLIENT_ERROR bad command line format".
	Reply string
	// Close tells the server to close the connection after writing Reply.
	Close bool
	// Raw, when set, is written as it is in place of Reply: a reply in
	// memcached's binary protocol (see AppendBinaryNotSupported).
	Raw []byte
	// TooLarge marks a storage command whose value exceeded MaxItemSize.
	// Next then also fills the Request's Command, Keys, Flags, Exptime, CAS
	// and Noreply (not Data): memcached drops the stored item when a set is
	// rejected this way, and the server must do the same.
	TooLarge bool
	// Counted is the command a rejected request still counts as in the
	// general stats, as memcached counts it, or 0: a storage command whose
	// data block did not end in "\r\n" (cmd_set), a flush_all whose delay
	// is not a number (cmd_flush).
	Counted Command

	reason string // for Error() when Reply is empty or not self-explanatory
	// suppressed is the line noreply kept from the client, for Line.
	suppressed string
}

// Line is the reply line memcached would send for e, even where noreply
// suppressed it (Reply is then empty), so that the server can count the
// error by its kind; "" when there is none (a connection closed at once).
func (e *Error) Line() string {
	if e.Reply != "" {
		return e.Reply
	}
	return e.suppressed
}

func (e *Error) Error() string {
	switch {
	case e.reason != "" && e.Reply != "":
		return "mcproto: " + e.reason + ": " + e.Reply
	case e.reason != "":
		return "mcproto: " + e.reason
	default:
		return "mcproto: " + e.Reply
	}
}

// replyError is an error answered with msg, or with nothing when the request
// asked for noreply; the connection stays open.
func replyError(msg string, noreply bool) *Error {
	if noreply {
		return &Error{reason: "suppressed by noreply: " + msg, suppressed: msg}
	}
	return &Error{Reply: msg}
}

// closeError closes the connection without a reply.
func closeError(reason string) *Error {
	return &Error{Close: true, reason: reason}
}
