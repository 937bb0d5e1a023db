package memcache

import (
	"bytes"

	"github.com/kvd-project/kvd/internal/mcproto"
	"github.com/kvd-project/kvd/internal/mcserver"
)

// Authentication, with Config.Auth set, follows memcached 1.6 (its -Y
// authfile for text and meta, its -S SASL for binary), checked against its
// proto_text.c (try_read_command_asciiauth) and proto_bin.c:
//
//   - Text and meta: until it authenticates, a connection may send only
//     "set <any key> <flags> <exptime> <bytes>" with "<user> <password>" as
//     the data, answered STORED or "CLIENT_ERROR authentication failure"
//     whatever noreply says. Anything else is "CLIENT_ERROR
//     unauthenticated" (version too, as in memcached); quit closes.
//   - Binary: SASL list mechanisms answers "PLAIN"; SASL auth with
//     mechanism PLAIN and RFC 4616's message ([authzid] NUL user NUL
//     password) answers "Authenticated", or status 0x20 "Auth failure."
//     (also for any other mechanism, a malformed message, an authzid
//     other than the user, and SASL step: PLAIN has one step). Version is
//     answered; anything else is 0x20 "Auth failure." and the connection
//     closes, as memcached closes it.
//   - A connection that authenticated stays so for its life: the file
//     changing, or a later failed attempt, does not log it out (memcached
//     drops a binary connection's authentication when a new SASL attempt
//     fails; kvd has no per-user rights for that to protect).
//   - Every attempt that reaches the password check counts in auth_cmds,
//     and a failed one in auth_errors too (memcached's stats); a failure
//     is logged through the Store's rate-limited Failed, with the client's
//     address and the user, never the password.
//
// Deliberate differences: memcached in -Y mode closes the connection on a
// line shorter than 6 bytes ("mn", "get"), and parses the data of a
// refused "add" as the next command; kvd's codec reads the request as
// always and answers "CLIENT_ERROR unauthenticated". An auth "set" whose
// value is over the item size limit has its data swallowed.

// The text protocol's words, after CLIENT_ERROR, as memcached 1.6 words
// them.
const (
	msgUnauthenticated   = "unauthenticated"
	msgAuthFailure       = "authentication failure"
	msgAuthTokenTooLong  = "auth token too long"
	msgBadTermination    = "bad command line termination"
	msgBadAuthToken      = "bad authentication token format"
	maxAuthToken         = 16384 // memcached's MAX_AUTH_REQ_LEN
	saslMechanisms       = "PLAIN"
	saslAuthenticated    = "Authenticated"
	reasonWrongPassword  = "wrong password or unknown user"
	reasonUnknownMech    = "unknown SASL mechanism"
	reasonMalformedPlain = "malformed SASL PLAIN message"
	reasonAuthzid        = "SASL PLAIN authorization identity other than the user"
	reasonSASLStep       = "SASL step: PLAIN has a single step"
)

// refuse answers a request on a connection that has not authenticated:
// an authentication, or memcached's refusal. It returns nil for the
// requests answered as usual (binary Version and SASL, text quit).
func (ss *session) refuse(req *mcproto.Request) *mcserver.Reply {
	e := req.Echo
	if e.Proto == mcproto.Binary {
		switch req.Op {
		case mcproto.OpVersion, mcproto.OpSASLList, mcproto.OpSASLAuth, mcproto.OpSASLStep:
			return nil
		}
		ss.s.stats.count(req.Op, ResultClientError, 1)
		return mcserver.Final(ss.enc.AppendError(nil, e, mcproto.KindAuth, "")).ThenClose()
	}
	switch {
	case req.Op == mcproto.OpQuit:
		return nil
	case req.Op == mcproto.OpSet && e.Proto == mcproto.Text:
		return ss.textAuth(req)
	}
	ss.s.stats.count(req.Op, ResultClientError, 1)
	return ss.authError(e, msgUnauthenticated)
}

// refuseRejected answers a request the codec refused on a connection that
// has not authenticated, as memcached's authentication mode would; nil
// where the codec's own answer stands (the connection closes).
func (ss *session) refuseRejected(req *mcproto.Request, perr *mcproto.Error) *mcserver.Reply {
	if perr.Close && (req.Echo.Proto != mcproto.Binary || perr.Kind == mcproto.KindError) {
		// An over-long line, an HTTP request, a bad magic byte, a header
		// memcached cannot read: closed before authentication matters.
		return nil
	}
	ss.s.stats.count(0, ResultClientError, 1)
	if req.Echo.Proto == mcproto.Binary {
		return mcserver.Final(ss.enc.AppendError(nil, req.Echo, mcproto.KindAuth, "")).ThenClose()
	}
	switch {
	case req.Op == mcproto.OpSet && perr.TooLarge:
		// Never the delete a too-large set makes: nobody may write yet.
		return ss.authError(req.Echo, msgAuthTokenTooLong)
	case perr.Counted == mcproto.OpSet:
		return ss.authError(req.Echo, msgBadTermination)
	}
	return ss.authError(req.Echo, msgUnauthenticated)
}

// authError renders a text refusal, noreply or not: memcached's
// authentication mode answers before it looks for noreply.
func (ss *session) authError(e mcproto.Echo, msg string) *mcserver.Reply {
	e.Noreply = false
	return mcserver.Final(ss.enc.AppendError(nil, e, mcproto.KindAuth, msg))
}

// textAuth answers the text protocol's authentication: a set whose data is
// "<user> <password>".
func (ss *session) textAuth(req *mcproto.Request) *mcserver.Reply {
	e := req.Echo
	e.Noreply = false
	if len(req.Data) > maxAuthToken {
		return ss.authError(e, msgAuthTokenTooLong)
	}
	user, password, ok := bytes.Cut(req.Data, []byte(" "))
	if !ok {
		return ss.authError(e, msgBadAuthToken)
	}
	if !ss.verify(string(user), string(password)) {
		return ss.authError(e, msgAuthFailure)
	}
	return mcserver.Final(ss.enc.AppendStatus(nil, e, mcproto.StatusStored, 0))
}

// sasl answers the binary protocol's SASL requests, authenticated or not.
func (ss *session) sasl(req *mcproto.Request) *mcserver.Reply {
	st, e := ss.s.stats, req.Echo
	if ss.senc == nil { // only the binary codec decodes SASL
		st.count(0, ResultError, 1)
		return mcserver.Final(ss.enc.AppendError(nil, e, mcproto.KindError, ""))
	}
	switch req.Op {
	case mcproto.OpSASLList:
		st.count(req.Op, ResultOK, 1)
		return mcserver.Final(ss.senc.AppendSASL(nil, e, saslMechanisms))
	case mcproto.OpSASLStep:
		ss.failed("", reasonSASLStep)
	default:
		if user, password, reason := parsePlain(req.Keys[0], req.Data); reason != "" {
			ss.failed(user, reason)
		} else if ss.verify(user, password) {
			st.count(req.Op, ResultOK, 1)
			return mcserver.Final(ss.senc.AppendSASL(nil, e, saslAuthenticated))
		}
	}
	st.count(req.Op, ResultClientError, 1)
	return mcserver.Final(ss.enc.AppendError(nil, e, mcproto.KindAuth, ""))
}

// parsePlain reads a SASL PLAIN message (RFC 4616: [authzid] NUL authcid
// NUL passwd) sent with mechanism mech. reason is why it is refused, ""
// when it is not; user is the authentication identity when one was read.
func parsePlain(mech, msg []byte) (user, password, reason string) {
	if string(mech) != saslMechanisms {
		return "", "", reasonUnknownMech
	}
	parts := bytes.Split(msg, []byte{0})
	if len(parts) != 3 || len(parts[1]) == 0 {
		return "", "", reasonMalformedPlain
	}
	authzid, user := string(parts[0]), string(parts[1])
	if authzid != "" && authzid != user {
		// Acting as another identity needs rights kvd does not have.
		return user, "", reasonAuthzid
	}
	return user, string(parts[2]), ""
}

// verify checks a user's password; on success the connection is
// authenticated for the rest of its life.
func (ss *session) verify(user, password string) bool {
	ss.s.stats.AuthCmds.Add(1)
	if ss.s.cfg.Auth.Verify(user, password) {
		ss.authed = true
		return true
	}
	ss.s.stats.AuthErrors.Add(1)
	ss.s.cfg.Auth.Failed(ss.c.RemoteAddr(), user, reasonWrongPassword)
	return false
}

// failed counts and logs an attempt refused before the password check.
func (ss *session) failed(user, reason string) {
	ss.s.stats.AuthCmds.Add(1)
	ss.s.stats.AuthErrors.Add(1)
	ss.s.cfg.Auth.Failed(ss.c.RemoteAddr(), user, reason)
}
