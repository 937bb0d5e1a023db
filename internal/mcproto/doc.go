// Package mcproto is the protocol-neutral vocabulary of kvd's memcache
// front end: the Request every codec decodes into, the Op it names, the
// outcomes and error kinds a reply carries, and the Codec interface a
// protocol implements. Sniff picks a connection's protocol from its first
// byte, as memcached does.
//
// The codecs live below it, one package per wire format:
//
//   - mcproto/ascii: the text protocol and its meta commands, which share
//     one line reader because a client may mix them on one connection;
//   - mcproto/binary: memcached's binary protocol.
//
// A new protocol's codec goes in a package of its own beside them, turns
// bytes into Requests and Echo+outcome into bytes, and imports only this
// package. What a request means (which kv call it makes, which stats it
// counts) lives once above the codecs, in internal/memcache; the
// connection loop that drives a codec is internal/mcserver.
//
// Like its codecs, mcproto is pure: no network, no storage, no imports
// from the rest of kvd.
package mcproto
