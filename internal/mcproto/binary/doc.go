// Package binary is kvd's codec for memcached's binary protocol, which a
// connection speaks when its first byte is 0x80 (mcproto.BinaryMagic): a
// bounded decoder of requests into mcproto.Requests (Codec.Next) and the
// encoder of their responses (Codec's Append methods, mcproto.Encoder).
//
// It owns the wire format only: which opcodes exist, the shape each one's
// body must have, what a malformed request is answered and whether the
// connection survives it, and how each neutral outcome is worded as a
// response. What a request means is internal/memcache's; internal/mcserver
// builds one Codec per binary connection (Open), calls Next, Buffered and
// Phase from the connection's reader goroutine only, and the Append
// methods, which hold no state, from any goroutine. It is pure: no network,
// no storage, and of kvd it imports only mcproto.
//
// # The reference
//
// memcached 1.6.18's proto_bin.c, as the server behaves, every response
// below checked byte for byte against the real binary:
//
//   - A request is a 24-byte header, extras, key and value. A magic byte
//     other than 0x80 closes the connection without a reply. The extras
//     and key are read before any length is checked; when they and the
//     header exceed memcached's 16 KiB read buffer, the connection closes
//     without a reply.
//   - Extras and key longer than the declared body: "Unknown command"
//     (0x0081), then the connection closes. A key over 250 bytes: "Invalid
//     arguments" (0x0004), then it closes. A known opcode whose extras, key
//     or body length are not the ones it takes (Get with extras, Set
//     without its 8 bytes of extras, Noop with a body, ...): "Invalid
//     arguments", then it closes.
//   - An opcode memcached 1.6.18 does not serve (Verbosity 0x1b among
//     them: 1.6.18 has no case for it) is answered "Unknown command" and
//     its body is skipped; the connection goes on.
//   - Touch, GAT* and Stat consume only their extras and key: bytes the
//     body declares beyond them are read as the next request, as memcached
//     reads them.
//   - A value over Limits.MaxItemSize is discarded as it streams by and
//     answered "Too large." (0x0003); the connection goes on.
//   - Set, Add and Replace with a non-zero CAS are compare-and-swaps
//     (mcproto.OpCas); Append, Prepend, Delete, Increment and Decrement
//     carry the CAS as a condition (Request.CAS). Expiration times are
//     unsigned 32-bit: memcached never reads them as negative.
//   - Quiet opcodes drop the responses memcached drops: quiet gets their
//     misses, the others their successes; errors are always sent.
//
// The opcode → Request mapping:
//
//	Get GetQ GetK GetKQ (0x00 0x09 0x0c 0x0d)  OpGet, one key
//	GAT GATQ GATK GATKQ (0x1d 0x1e 0x23 0x24)  OpGat, one key, Exptime
//	Touch (0x1c)                               OpTouch, Exptime
//	Set Add Replace (+Q 0x11-0x13)             OpSet OpAdd OpReplace, Flags, Exptime; OpCas when CAS != 0
//	Append Prepend (+Q 0x19 0x1a)              OpAppend OpPrepend, CAS (a condition when != 0)
//	Delete DeleteQ (0x04 0x14)                 OpDelete, CAS (a condition when != 0)
//	Increment Decrement (+Q 0x15 0x16)         OpIncr OpDecr, Delta, Initial, CAS; Create and Exptime unless the expiration is 0xffffffff
//	Flush FlushQ (0x08 0x18)                   OpFlushAll, Delay and HasDelay when 4 bytes of extras
//	Noop (0x0a), Version (0x0b)                OpNoop, OpVersion
//	Quit QuitQ (0x07 0x17)                     OpQuit
//	Stat (0x10)                                OpStats, Args the key split on spaces
//	SASL list, auth, step (0x20 0x21 0x22)     OpSASLList, OpSASLAuth, OpSASLStep (Keys[0] the mechanism, Data the data)
//
// Echo carries Proto Binary, the Op, the request's Opcode and Opaque, and
// Quiet for the quiet opcodes.
//
// # Deliberate differences from memcached 1.6.18
//
//   - memcached skips an unknown opcode's whole declared body after it has
//     already read the extras and key, so it also eats as many bytes of the
//     next request; kvd skips exactly the rest of the body.
//   - A body declared at 2 GiB or more makes memcached's value length
//     negative, so it skips nothing and reads the value as requests; kvd
//     skips it.
//   - The size limit is on the value alone, as in the text codec;
//     memcached's also counts the key and its item header.
//   - Extras and key over the 16 KiB read buffer close the connection at
//     once; memcached closes once 16 KiB have arrived.
//   - A SASL request whose data exceeds MaxItemSize is answered "Unknown
//     command" (what memcached without SASL answers to every SASL request)
//     and its data skipped. Whether SASL is on, and what it answers, is
//     internal/memcache's (the codec only renders it: AppendSASL, and
//     KindAuth's 0x0020 "Auth failure.").
//   - Errors memcached never sends: KindBusy is 0x0085 and KindServer is
//     0x0086 (see Codec.AppendError).
package binary
