// Package ascii is kvd's codec for memcached's text protocol and, sharing
// its line reader, the meta commands: a bounded parser of requests (Reader),
// encoders of replies (the Append helpers and the Reply constants), and
// Codec, which puts the two behind mcproto.Codec.
//
// It is pure: no network, no storage, and of kvd it imports only the
// protocol-neutral mcproto. The memcache listener (internal/mcserver) owns
// one Codec per text connection and calls its Reader from that
// connection's reader goroutine only; a Reader is not safe for concurrent
// use. The encoder methods hold no state and may be called from any
// goroutine.
//
// # What "exactly memcached" means here
//
// The parser reproduces memcached 1.6's text protocol as the server behaves,
// not only as doc/protocol.txt describes it. The reference is memcached
// 1.6.18 (proto_text.c, util.c) and every reply string below was checked
// against the real binary:
//
//   - Tokens are split on the space character only; a NUL byte ends the line;
//     one trailing '\r' before '\n' is dropped, and a bare "\n" ends a line too.
//   - Numbers follow C strtoul/strtol as memcached's safe_strto* helpers use
//     them: leading whitespace and a sign are accepted, the number may be
//     followed by a whitespace byte and anything after it, and 32-bit fields
//     (flags, exptime, the byte count, verbosity, flush_all's delay) are
//     truncated to 32 bits the way memcached truncates them.
//   - Keys are any bytes other than space, NUL and a line break, up to 250
//     bytes. memcached does not reject control characters in text-protocol
//     keys, so neither does this parser.
//   - Wrong token counts answer ERROR; bad numbers and over-long keys answer
//     the CLIENT_ERROR line memcached uses for that command; noreply
//     suppresses those CLIENT_ERROR lines too, exactly where memcached does.
//   - A storage command whose line is rejected does not swallow its data
//     block: the block is then read as a command line (usually ERROR), as in
//     memcached. A value over Limits.MaxItemSize is swallowed (bytes+2,
//     streamed, never buffered) and answered SERVER_ERROR object too large
//     for cache. A block whose last two bytes are not "\r\n" is answered
//     CLIENT_ERROR bad data chunk, and parsing resumes right after it.
//   - A line over Limits.MaxLine (2048) closes the connection without a reply
//     unless it is a get/gets/gat/gats line, which may reach
//     Limits.MaxMultigetLine. An unknown command whose last token starts with
//     "HTTP/" closes the connection without a reply.
//
// Deliberate differences from memcached are listed on Reader.
package ascii
