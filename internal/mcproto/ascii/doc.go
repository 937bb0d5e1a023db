// Package ascii is kvd's codec for memcached's text protocol and, sharing
// its line reader, the meta commands: a bounded parser of requests (Reader),
// encoders of replies (the Append helpers and the Reply constants), and
// Codec, which puts the two behind mcproto.Codec and mcproto.MetaEncoder.
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
//
// # Meta commands
//
// mg, ms, md, ma, me and mn share the line reader, and its MaxLine bound,
// with the text protocol. They follow 1.6.18's proto_text.c: one flag
// preparse for every command (so mg takes ms's letters, as there; P and L
// are ignored), memcached's error line for each fault and its choice when
// a line has several, ms's data block read like set's and swallowed when
// the line is refused after its length, and every error shown under q.
// Codec.AppendMeta renders replies by walking the request's flag tokens in
// order, as memcached does.
//
// Deliberate differences from 1.6.18:
//   - E (the CAS a write gives its item) and md's x (keep the item with an
//     empty value) are accepted, as newer memcached accepts them; 1.6.18
//     answers "invalid flag".
//   - me prints exp as the seconds left (-1 for none), as newer memcached
//     does; 1.6.18 prints their negation. cls is always 1.
//   - An O token over 32 bytes is refused before anything happens; mg and
//     ma in memcached notice it while rendering, after the item was read,
//     touched, vivified or changed (and ma's non-numeric error wins there).
//   - k (and me's key) come back in base64 when the request had b;
//     memcached's mg hit and me go by how the item was stored, a mark kvd
//     does not keep.
//   - ms is too large when its value exceeds MaxItemSize, as set is;
//     memcached counts the item's header and key too.
package ascii
