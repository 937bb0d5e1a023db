// Package compat holds the memcached conformance suite: raw wire exchanges
// whose exact replies were taken from memcached 1.6, run against any server
// that speaks the memcached text protocol. TestConformanceMemcached runs it
// against the real memcached binary when installed, which keeps the table
// honest; a kvd test calls runConformance against a running kvd node.
package compat

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// exchange is one conversation on a fresh connection. Each step sends bytes
// and expects an exact reply, described by a template:
//
//	{p}        the exchange's unique key prefix (run ID + name), in send and expect
//	{p:N}      the prefix padded with 'k' to exactly N bytes
//	{$v}       a value captured earlier in the exchange
//	{u64}      (expect only) one or more decimal digits
//	{u64:v}    the same, captured as v (a CAS unique, for instance)
//	{line}     (expect only) any bytes up to the next "\r\n"
//	{stats}    (expect only) one or more "STAT <name> <value>\r\n" lines
//	{sp}       (expect only) zero or more spaces
//	{{         a literal '{'
//
// After the last step the server must either close the connection (close
// set) or answer a sentinel "get" with exactly "END\r\n", which proves that
// nothing unexpected was sent and that the connection still works.
type exchange struct {
	name  string
	steps []step
	close bool
}

type step struct {
	send   string
	expect string
}

// one is an exchange of a single step.
func one(name, send, expect string) exchange {
	return exchange{name: name, steps: []step{{send, expect}}}
}

// closing is a single-step exchange after which the server closes.
func closing(name, send, expect string) exchange {
	return exchange{name: name, steps: []step{{send, expect}}, close: true}
}

const (
	errLine    = "ERROR\r\n"
	badFormat  = "CLIENT_ERROR bad command line format\r\n"
	badChunk   = "CLIENT_ERROR bad data chunk\r\n"
	badExptime = "CLIENT_ERROR invalid exptime argument\r\n"
	badDelta   = "CLIENT_ERROR invalid numeric delta argument\r\n"
	nonNumeric = "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
	tooLarge   = "SERVER_ERROR object too large for cache\r\n"
	delUsage   = "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
)

// big is a value over the default item size limit of memcached (-I 1m) and
// of kvd (--max-item-size 1 MiB).
var big = strings.Repeat("x", 2_000_000)

// conformance exchanges are independent of each other (unique keys) and run
// in parallel on one shared server.
var conformance = []exchange{
	// Storage and retrieval.
	one("set_get", "set {p}a 5 0 3\r\nabc\r\nget {p}a\r\n", "STORED\r\nVALUE {p}a 5 3\r\nabc\r\nEND\r\n"),
	one("get_miss", "get {p}a\r\n", "END\r\n"),
	one("multiget", "set {p}a 1 0 1\r\nA\r\nset {p}b 2 0 2\r\nBB\r\nget {p}a {p}none {p}b {p}a\r\n",
		"STORED\r\nSTORED\r\nVALUE {p}a 1 1\r\nA\r\nVALUE {p}b 2 2\r\nBB\r\nVALUE {p}a 1 1\r\nA\r\nEND\r\n"),
	one("gets", "set {p}a 0 0 1\r\nx\r\ngets {p}a {p}none\r\n", "STORED\r\nVALUE {p}a 0 1 {u64}\r\nx\r\nEND\r\n"),
	one("bget", "set {p}a 0 0 1\r\nx\r\nbget {p}a\r\n", "STORED\r\nVALUE {p}a 0 1\r\nx\r\nEND\r\n"),
	one("empty_value", "set {p}a 0 0 0\r\n\r\nget {p}a\r\n", "STORED\r\nVALUE {p}a 0 0\r\n\r\nEND\r\n"),
	one("binary_value", "set {p}a 0 0 7\r\na\r\nb\x00c\n\r\nget {p}a\r\n", "STORED\r\nVALUE {p}a 0 7\r\na\r\nb\x00c\n\r\nEND\r\n"),
	one("overwrite", "set {p}a 1 0 1\r\nx\r\nset {p}a 2 0 2\r\nyy\r\nget {p}a\r\n", "STORED\r\nSTORED\r\nVALUE {p}a 2 2\r\nyy\r\nEND\r\n"),
	one("flags_max", "set {p}a 4294967295 0 1\r\nx\r\nget {p}a\r\n", "STORED\r\nVALUE {p}a 4294967295 1\r\nx\r\nEND\r\n"),
	one("flags_wrap_2^32", "set {p}a 4294967297 0 1\r\nx\r\nget {p}a\r\n", "STORED\r\nVALUE {p}a 1 1\r\nx\r\nEND\r\n"),
	one("bytes_wrap_2^32", "set {p}a 0 0 4294967297\r\nx\r\nget {p}a\r\n", "STORED\r\nVALUE {p}a 0 1\r\nx\r\nEND\r\n"),
	one("number_forms", "set {p}a +0 -0 +01\r\nx\r\nset {p}b 0 0 1\tjunk\r\ny\r\nget {p}a {p}b\r\n",
		"STORED\r\nSTORED\r\nVALUE {p}a 0 1\r\nx\r\nVALUE {p}b 0 1\r\ny\r\nEND\r\n"),
	one("exptime_future", "set {p}a 0 1000 1\r\nx\r\nget {p}a\r\n", "STORED\r\nVALUE {p}a 0 1\r\nx\r\nEND\r\n"),
	one("exptime_negative", "set {p}a 0 -1 1\r\nx\r\nget {p}a\r\n", "STORED\r\nEND\r\n"),
	one("exptime_absolute_past", "set {p}a 0 1000000000 1\r\nx\r\nget {p}a\r\n", "STORED\r\nEND\r\n"),
	one("exptime_wrap_to_-1", "set {p}a 0 4294967295 1\r\nx\r\nget {p}a\r\n", "STORED\r\nEND\r\n"),
	one("add", "add {p}a 1 0 1\r\nx\r\nadd {p}a 2 0 1\r\ny\r\nget {p}a\r\n", "STORED\r\nNOT_STORED\r\nVALUE {p}a 1 1\r\nx\r\nEND\r\n"),
	one("replace", "replace {p}a 0 0 1\r\nx\r\nset {p}a 1 0 1\r\ny\r\nreplace {p}a 3 0 1\r\nz\r\nget {p}a\r\n",
		"NOT_STORED\r\nSTORED\r\nSTORED\r\nVALUE {p}a 3 1\r\nz\r\nEND\r\n"),
	one("append_prepend_keep_flags",
		"append {p}a 0 0 1\r\nx\r\nprepend {p}a 0 0 1\r\nx\r\nset {p}a 7 0 1\r\nb\r\nappend {p}a 9 0 1\r\nc\r\nprepend {p}a 9 0 1\r\na\r\nget {p}a\r\n",
		"NOT_STORED\r\nNOT_STORED\r\nSTORED\r\nSTORED\r\nSTORED\r\nVALUE {p}a 7 3\r\nabc\r\nEND\r\n"),
	one("bare_LF_lines", "set {p}a 0 0 1\nx\r\nget {p}a\n", "STORED\r\nVALUE {p}a 0 1\r\nx\r\nEND\r\n"),
	one("extra_spaces", "  set  {p}a  0  0  1  \r\nx\r\nget   {p}a  \r\n", "STORED\r\nVALUE {p}a 0 1\r\nx\r\nEND\r\n"),
	one("sixth_token_not_noreply", "set {p}a 0 0 1 whatever\r\nx\r\n", "STORED\r\n"),
	{name: "split_data_block", steps: []step{
		{"set {p}a 0 0 5\r\nab", ""},
		{"c", ""},
		{"de\r", ""},
		{"\nget {p}a\r\n", "STORED\r\nVALUE {p}a 0 5\r\nabcde\r\nEND\r\n"},
	}},
	one("multiget_long_line", longMultiget(), "STORED\r\nVALUE {p}k0150 0 1\r\nx\r\nEND\r\n"),

	// cas.
	{name: "cas_flow", steps: []step{
		{"set {p}a 0 0 1\r\nx\r\ngets {p}a\r\n", "STORED\r\nVALUE {p}a 0 1 {u64:c}\r\nx\r\nEND\r\n"},
		{"cas {p}a 4 0 1 {$c}\r\ny\r\ncas {p}a 0 0 1 {$c}\r\nz\r\ngets {p}a\r\n",
			"STORED\r\nEXISTS\r\nVALUE {p}a 4 1 {u64:c2}\r\ny\r\nEND\r\n"},
		{"cas {p}a 0 0 1 {$c2} noreply\r\nw\r\nget {p}a\r\n", "VALUE {p}a 0 1\r\nw\r\nEND\r\n"},
	}},
	{name: "cas_after_set", steps: []step{
		{"set {p}a 0 0 1\r\nx\r\ngets {p}a\r\n", "STORED\r\nVALUE {p}a 0 1 {u64:c}\r\nx\r\nEND\r\n"},
		{"set {p}a 0 0 1\r\ny\r\ncas {p}a 0 0 1 {$c}\r\nz\r\nget {p}a\r\n", "STORED\r\nEXISTS\r\nVALUE {p}a 0 1\r\ny\r\nEND\r\n"},
	}},
	{name: "cas_after_append", steps: []step{
		{"set {p}a 0 0 1\r\nx\r\ngets {p}a\r\n", "STORED\r\nVALUE {p}a 0 1 {u64:c}\r\nx\r\nEND\r\n"},
		{"append {p}a 0 0 1\r\ny\r\ncas {p}a 0 0 1 {$c}\r\nz\r\nget {p}a\r\n", "STORED\r\nEXISTS\r\nVALUE {p}a 0 2\r\nxy\r\nEND\r\n"},
	}},
	one("cas_not_found", "cas {p}a 0 0 1 1\r\nx\r\n", "NOT_FOUND\r\n"),
	one("cas_max_unique", "set {p}a 0 0 1\r\nx\r\ncas {p}a 0 0 1 18446744073709551615\r\ny\r\n", "STORED\r\nEXISTS\r\n"),

	// incr, decr.
	one("incr_decr", "set {p}n 0 0 2\r\n10\r\nincr {p}n 5\r\ndecr {p}n 3\r\nincr {p}n +1\r\n", "STORED\r\n15\r\n12\r\n13\r\n"),
	one("incr_grows", "set {p}n 3 0 2\r\n99\r\nincr {p}n 1\r\nget {p}n\r\n", "STORED\r\n100\r\nVALUE {p}n 3 3\r\n100\r\nEND\r\n"),
	// protocol.txt: a number that loses digits may be space-padded.
	one("decr_shrinks", "set {p}n 0 0 3\r\n100\r\ndecr {p}n 91\r\nget {p}n\r\n", "STORED\r\n9\r\nVALUE {p}n 0 {u64}\r\n9{sp}\r\nEND\r\n"),
	one("incr_wrap_2^64", "set {p}n 0 0 20\r\n18446744073709551615\r\nincr {p}n 1\r\nincr {p}n 18446744073709551615\r\n", "STORED\r\n0\r\n18446744073709551615\r\n"),
	one("decr_floor_0", "set {p}n 0 0 1\r\n5\r\ndecr {p}n 10\r\ndecr {p}n 1\r\n", "STORED\r\n0\r\n0\r\n"),
	// memcached reads the stored number with strtoull: leading blanks, a
	// sign, and anything after a blank pass (a decr's padding then an append).
	one("incr_lenient_values", "set {p}n 0 0 3\r\n 12\r\nincr {p}n 1\r\nget {p}n\r\n"+
		"set {p}m 0 0 3\r\n12 \r\nappend {p}m 0 0 1\r\n0\r\ndecr {p}m 1\r\nset {p}o 0 0 3\r\n+12\r\nincr {p}o 1\r\n",
		"STORED\r\n13\r\nVALUE {p}n 0 3\r\n13 \r\nEND\r\nSTORED\r\nSTORED\r\n11\r\nSTORED\r\n13\r\n"),
	one("incr_non_numeric", "set {p}n 0 0 3\r\nabc\r\nincr {p}n 1\r\ndecr {p}n 1\r\n", "STORED\r\n"+nonNumeric+nonNumeric),
	one("incr_miss", "incr {p}n 1\r\ndecr {p}n 1\r\n", "NOT_FOUND\r\nNOT_FOUND\r\n"),
	one("incr_bad_delta", "incr {p}n x\r\nincr {p}n -1\r\nincr {p}n 18446744073709551616\r\ndecr {p}n 1x\r\n", badDelta+badDelta+badDelta+badDelta),
	one("incr_keeps_flags", "set {p}n 42 0 1\r\n1\r\nincr {p}n 1\r\nget {p}n\r\n", "STORED\r\n2\r\nVALUE {p}n 42 1\r\n2\r\nEND\r\n"),

	// touch, gat, gats.
	one("touch", "touch {p}a 10\r\nset {p}a 0 0 1\r\nx\r\ntouch {p}a 100\r\nget {p}a\r\ntouch {p}a -1\r\nget {p}a\r\n",
		"NOT_FOUND\r\nSTORED\r\nTOUCHED\r\nVALUE {p}a 0 1\r\nx\r\nEND\r\nTOUCHED\r\nEND\r\n"),
	one("touch_bad", "touch {p}a x\r\ntouch {p}a\r\n", badExptime+errLine),
	one("gat", "set {p}a 3 0 1\r\nx\r\ngat 100 {p}a {p}none\r\ngats 100 {p}a\r\n",
		"STORED\r\nVALUE {p}a 3 1\r\nx\r\nEND\r\nVALUE {p}a 3 1 {u64}\r\nx\r\nEND\r\n"),
	one("gat_expires", "set {p}a 0 0 1\r\nx\r\ngat -1 {p}a\r\nget {p}a\r\n", "STORED\r\nVALUE {p}a 0 1\r\nx\r\nEND\r\nEND\r\n"),
	one("gat_no_key", "gat 10\r\n", "END\r\n"),
	one("gat_bad", "gat x {p}a\r\ngat\r\ngats\r\n", badExptime+errLine+errLine),

	// delete.
	one("delete", "set {p}a 0 0 1\r\nx\r\ndelete {p}a\r\ndelete {p}a\r\nget {p}a\r\n", "STORED\r\nDELETED\r\nNOT_FOUND\r\nEND\r\n"),
	one("delete_zero", "set {p}a 0 0 1\r\nx\r\ndelete {p}a 0\r\n", "STORED\r\nDELETED\r\n"),
	one("delete_usage", "delete {p}a 1\r\ndelete {p}a x\r\ndelete {p}a 0 0\r\n", delUsage+delUsage+delUsage),
	one("delete_tokens", "delete\r\ndelete {p}a 0 noreply x\r\n", errLine+errLine),

	// noreply.
	one("noreply_all",
		"set {p}a 0 0 1 noreply\r\n1\r\nadd {p}a 0 0 1 noreply\r\n2\r\nreplace {p}a 0 0 1 noreply\r\n3\r\n"+
			"append {p}a 0 0 1 noreply\r\n0\r\nprepend {p}a 0 0 1 noreply\r\n2\r\nincr {p}a 5 noreply\r\n"+
			"decr {p}a 10 noreply\r\ntouch {p}a 100 noreply\r\nget {p}a\r\ndelete {p}a noreply\r\nget {p}a\r\n",
		"VALUE {p}a 0 3\r\n225\r\nEND\r\nEND\r\n"),
	one("noreply_misses", "add {p}a 0 0 1\r\nx\r\nadd {p}a 0 0 1 noreply\r\ny\r\nreplace {p}b 0 0 1 noreply\r\ny\r\n"+
		"delete {p}b noreply\r\nincr {p}b 1 noreply\r\ntouch {p}b 1 noreply\r\ndelete {p}b 0 noreply\r\n", "STORED\r\n"),
	one("noreply_errors", "incr {p}n x noreply\r\ntouch {p}n x noreply\r\ndelete {p}n 1 noreply\r\nverbosity x noreply\r\n"+
		"set {p:251} 0 0 1 noreply\r\n", ""),
	one("noreply_not_last", "set {p}a 0 0 1 noreply extra\r\nx\r\n", errLine+errLine),
	one("noreply_as_bytes", "set {p}a 0 0 noreply\r\nx\r\n", errLine),

	// Keys.
	one("key_250", "set {p:250} 0 0 1\r\nx\r\nget {p:250}\r\n", "STORED\r\nVALUE {p:250} 0 1\r\nx\r\nEND\r\n"),
	one("key_251_set", "set {p:251} 0 0 1\r\nx\r\n", badFormat+errLine),
	// memcached 1.6.18 answers an over-long key in get/gets/gat/gats by
	// discarding every reply not yet sent on the connection, pipelined
	// replies of earlier commands included; one command per step keeps the
	// exchange deterministic.
	{name: "key_251_get", steps: []step{
		{"set {p}a 0 0 1\r\nx\r\n", "STORED\r\n"},
		{"get {p}a {p:251}\r\n", badFormat},
		{"gets {p:251} {p}a\r\n", badFormat},
		{"gat 1 {p}a {p:251}\r\n", badFormat},
		{"gats 1 {p:251}\r\n", badFormat},
	}},
	one("key_251_others", "incr {p:251} 1\r\ndecr {p:251} x\r\ntouch {p:251} 1\r\ndelete {p:251}\r\n",
		badFormat+badFormat+badFormat+badFormat),
	one("key_with_tab", "set {p}a\tb 0 0 1\r\nx\r\nget {p}a\tb\r\n", "STORED\r\nVALUE {p}a\tb 0 1\r\nx\r\nEND\r\n"),

	// Bad command lines. A rejected storage line does not swallow its data
	// block, which is then read as a command line.
	one("bad_flags", "set {p}a x 0 1\r\nx\r\nset {p}a -1 0 1\r\nx\r\n", badFormat+errLine+badFormat+errLine),
	one("bad_exptime", "set {p}a 0 x 1\r\nx\r\n", badFormat+errLine),
	one("bad_bytes", "set {p}a 0 0 x\r\nx\r\nset {p}a 0 0 -1\r\nx\r\n", badFormat+errLine+badFormat+errLine),
	one("bytes_int_max", "set {p}a 0 0 2147483646\r\nget {p}a\r\n", badFormat+"END\r\n"),
	one("bad_cas", "cas {p}a 0 0 1 x\r\nx\r\ncas {p}a 0 0 1 -1\r\nx\r\n", badFormat+errLine+badFormat+errLine),
	one("token_counts", "set {p}a 0 0\r\ncas {p}a 0 0 1\r\nx\r\nincr {p}a\r\ndecr {p}a 1 2 3\r\ntouch {p}a\r\n"+
		"get\r\ngets\r\nverbosity\r\nverbosity 1 2 3\r\n", errLine+errLine+errLine+errLine+errLine+errLine+errLine+errLine+errLine+errLine),
	one("unknown", "foo\r\n\r\nGET {p}a\r\nSet {p}a 0 0 1\r\nsetx\r\ng\r\nfoo http/1.1\r\n", errLine+errLine+errLine+errLine+errLine+errLine+errLine),

	// Data blocks.
	one("bad_data_chunk", "set {p}a 0 0 1\r\nxy\r\nget {p}a\r\n", badChunk+errLine+"END\r\n"),
	one("bad_data_chunk_short", "set {p}a 0 0 3\r\nab\r\nxx\r\nget {p}a\r\n", badChunk+errLine+"END\r\n"),
	one("bad_data_chunk_noreply", "set {p}a 0 0 1 noreply\r\nxyz\r\n", errLine),
	one("too_large", "set {p}a 0 0 2000000\r\n"+big+"\r\nget {p}a\r\n", tooLarge+"END\r\n"),
	one("too_large_drops_old_value", "set {p}a 0 0 1\r\nx\r\nset {p}a 0 0 2000000\r\n"+big+"\r\nget {p}a\r\n", "STORED\r\n"+tooLarge+"END\r\n"),
	one("too_large_noreply", "set {p}a 0 0 1\r\nx\r\nset {p}a 0 0 2000000 noreply\r\n"+big+"\r\nget {p}a\r\n", "STORED\r\nEND\r\n"),
	one("too_large_append_keeps", "set {p}a 0 0 1\r\nx\r\nappend {p}a 0 0 2000000\r\n"+big+"\r\nget {p}a\r\n",
		"STORED\r\n"+tooLarge+"VALUE {p}a 0 1\r\nx\r\nEND\r\n"),
	one("too_large_swallows_exactly", "set {p}a 0 0 2000000\r\n"+big+"XXget {p}a\r\n", tooLarge+"END\r\n"),

	// Admin.
	one("version", "version\r\n", "VERSION {line}\r\n"),
	one("stats", "stats\r\n", "{stats}END\r\n"),
	one("stats_unknown", "stats no_such_group\r\n", errLine),
	one("shutdown_not_enabled", "shutdown\r\nshutdown graceful\r\nshutdown noreply\r\n",
		"ERROR: shutdown not enabled\r\nERROR: shutdown not enabled\r\nERROR: shutdown not enabled\r\n"),
	one("verbosity", "verbosity 1\r\nverbosity 0 noreply\r\nverbosity x\r\nverbosity 0 extra\r\nverbosity 0\r\n", "OK\r\n"+badFormat+"OK\r\nOK\r\n"),

	// Closing.
	closing("quit", "set {p}a 0 0 1\r\nx\r\nquit\r\nget {p}a\r\n", "STORED\r\n"),
	closing("http_get", "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", ""),
	closing("http_post", "POST /v1/kv/x HTTP/1.0\r\n", ""),
	closing("line_too_long", "set "+strings.Repeat("k", 3000), ""),
}

// conformanceFlush exchanges flush the whole server, so they run in order,
// alone, after the others. The last one leaves no delayed flush pending.
var conformanceFlush = []exchange{
	one("flush_all", "set {p}a 0 0 1\r\nx\r\nflush_all\r\nget {p}a\r\nset {p}b 0 0 1\r\ny\r\nget {p}b\r\n",
		"STORED\r\nOK\r\nEND\r\nSTORED\r\nVALUE {p}b 0 1\r\ny\r\nEND\r\n"),
	one("flush_all_noreply", "set {p}a 0 0 1\r\nx\r\nflush_all noreply\r\nget {p}a\r\n", "STORED\r\nEND\r\n"),
	one("flush_all_zero", "set {p}a 0 0 1\r\nx\r\nflush_all 0\r\nget {p}a\r\n", "STORED\r\nOK\r\nEND\r\n"),
	one("flush_all_negative", "set {p}a 0 0 1\r\nx\r\nflush_all -1\r\nget {p}a\r\n", "STORED\r\nOK\r\nEND\r\n"),
	one("flush_all_bad", "set {p}a 0 0 1\r\nx\r\nflush_all x\r\nflush_all noreply 0\r\nflush_all 1 2 3\r\nflush_all x noreply\r\nget {p}a\r\n",
		"STORED\r\n"+badExptime+badExptime+errLine+"VALUE {p}a 0 1\r\nx\r\nEND\r\n"),
	// memcached keeps one flush horizon: a later flush_all replaces a
	// pending delayed one.
	one("flush_all_delay", "set {p}a 0 0 1\r\nx\r\nflush_all 3600\r\nget {p}a\r\nflush_all 3600 noreply\r\nflush_all 0\r\nget {p}a\r\n"+
		"set {p}b 0 0 1\r\ny\r\nget {p}b\r\n", "STORED\r\nOK\r\nVALUE {p}a 0 1\r\nx\r\nEND\r\nOK\r\nEND\r\nSTORED\r\nVALUE {p}b 0 1\r\ny\r\nEND\r\n"),
	// A delay over 30 days is an absolute time; one before anything was
	// stored flushes nothing (and replaces the pending delayed flush).
	one("flush_all_absolute_past", "set {p}a 0 0 1\r\nx\r\nflush_all 3600\r\nflush_all 1000000000\r\nflush_all 2592001 noreply\r\nget {p}a\r\n",
		"STORED\r\nOK\r\nOK\r\nVALUE {p}a 0 1\r\nx\r\nEND\r\n"),
	one("flush_all_last", "flush_all 0 extra\r\nflush_all\r\n", "OK\r\nOK\r\n"),
}

// longMultiget is a get line of about 8 KB, well over the 2048-byte bound of
// other lines, asking for 300 keys of which one exists.
func longMultiget() string {
	var b strings.Builder
	b.WriteString("set {p}k0150 0 0 1\r\nx\r\nget")
	for i := range 300 {
		fmt.Fprintf(&b, " {p}k%04d", i)
	}
	b.WriteString("\r\n")
	return b.String()
}

// runConformance runs every exchange against the memcached-protocol server
// at addr. It is server-agnostic: keys carry a per-run random prefix, so the
// server may hold other data and several runs may share it.
func runConformance(t *testing.T, addr string) {
	run := fmt.Sprintf("c%08x", rand.Uint32())
	t.Logf("key prefix %s_", run)
	t.Run("independent", func(t *testing.T) {
		for _, ex := range conformance {
			t.Run(ex.name, func(t *testing.T) {
				t.Parallel()
				runExchange(t, addr, run+"_"+ex.name+"_", ex)
			})
		}
	})
	t.Run("flush", func(t *testing.T) {
		for _, ex := range conformanceFlush {
			t.Run(ex.name, func(t *testing.T) {
				runExchange(t, addr, run+"_"+ex.name+"_", ex)
			})
		}
	})
}

// runExchange plays one exchange on a new connection.
func runExchange(t *testing.T, addr, prefix string, ex exchange) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	if d, ok := t.Deadline(); ok {
		// Not a timing assertion: it only turns a hang into a failure
		// before the test binary's own timeout.
		_ = conn.SetDeadline(d.Add(-5 * time.Second))
	}
	vars := map[string]string{}
	for i, st := range ex.steps {
		send := expand(t, st.send, prefix, vars)
		want := compile(t, expand(t, st.expect, prefix, vars))
		done := writeAsync(conn, send)
		got, err := readReply(conn, want, vars)
		if err != nil {
			t.Fatalf("step %d: %v\nsent:     %s\nexpected: %q\nreceived: %s", i, err, abbrev(send), st.expect, abbrev(string(got)))
		}
		if werr := <-done; werr != nil && !ex.close {
			t.Fatalf("step %d: write: %v", i, werr)
		}
	}
	if ex.close {
		expectClosed(t, conn)
		return
	}
	// The sentinel: nothing more was sent, and the connection still works.
	sentinel := "get " + prefix + "sentinel\r\n"
	done := writeAsync(conn, sentinel)
	got, err := readReply(conn, compile(t, "END\r\n"), vars)
	if err != nil {
		t.Fatalf("after the last step, sentinel get: %v\nreceived: %s", err, abbrev(string(got)))
	}
	if err := <-done; err != nil {
		t.Fatalf("sentinel write: %v", err)
	}
}

func writeAsync(conn net.Conn, s string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := io.WriteString(conn, s)
		done <- err
	}()
	return done
}

// readReply reads until the bytes match want completely, and fails as soon
// as they cannot.
func readReply(conn net.Conn, want []elem, vars map[string]string) ([]byte, error) {
	var got []byte
	buf := make([]byte, 64<<10)
	for {
		caps := map[string]string{}
		switch res, why := match(want, got, caps); res {
		case matched:
			for k, v := range caps {
				vars[k] = v
			}
			return got, nil
		case mismatch:
			return got, errors.New(why)
		}
		n, err := conn.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil && n == 0 {
			if res, _ := match(want, got, caps); res == matched {
				continue
			}
			return got, fmt.Errorf("reply incomplete: %w", err)
		}
	}
}

// expectClosed reads until the server closes the connection; it must send
// nothing more.
func expectClosed(t *testing.T, conn net.Conn) {
	buf := make([]byte, 4096)
	var extra []byte
	for {
		n, err := conn.Read(buf)
		extra = append(extra, buf[:n]...)
		if err == nil {
			continue
		}
		if len(extra) > 0 {
			t.Fatalf("server sent %s before closing", abbrev(string(extra)))
		}
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return
		}
		t.Fatalf("server did not close the connection: %v", err)
	}
}

func abbrev(s string) string {
	if len(s) > 300 {
		return strconv.Quote(s[:150]) + fmt.Sprintf(" …(%d bytes)… ", len(s)-300) + strconv.Quote(s[len(s)-150:])
	}
	return strconv.Quote(s)
}

// expand replaces {p}, {p:N} and {$v} and leaves the expect-only
// placeholders for compile.
func expand(t *testing.T, tmpl, prefix string, vars map[string]string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		b.WriteString(tmpl[:i])
		tmpl = tmpl[i:]
		if strings.HasPrefix(tmpl, "{{") {
			b.WriteString("{{") // compile turns it into '{'
			tmpl = tmpl[2:]
			continue
		}
		j := strings.IndexByte(tmpl, '}')
		if j < 0 {
			t.Fatalf("unterminated placeholder in %q", tmpl)
		}
		ph := tmpl[1:j]
		tmpl = tmpl[j+1:]
		switch {
		case ph == "p":
			b.WriteString(prefix)
		case strings.HasPrefix(ph, "p:"):
			n, err := strconv.Atoi(ph[2:])
			if err != nil || n < len(prefix) {
				t.Fatalf("bad placeholder {%s} (prefix %q)", ph, prefix)
			}
			b.WriteString(prefix + strings.Repeat("k", n-len(prefix)))
		case strings.HasPrefix(ph, "$"):
			v, ok := vars[ph[1:]]
			if !ok {
				t.Fatalf("{%s} used before it was captured", ph)
			}
			b.WriteString(v)
		default:
			b.WriteString("{" + ph + "}")
		}
	}
}

type elemKind uint8

const (
	litElem elemKind = iota
	u64Elem
	lineElem
	statsElem
	spacesElem
)

type elem struct {
	kind elemKind
	lit  string // litElem
	name string // u64Elem: capture name, or ""
}

// compile turns an expanded expect template into elements.
func compile(t *testing.T, tmpl string) []elem {
	var out []elem
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			out = append(out, elem{kind: litElem, lit: lit.String()})
			lit.Reset()
		}
	}
	for len(tmpl) > 0 {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			lit.WriteString(tmpl)
			break
		}
		lit.WriteString(tmpl[:i])
		tmpl = tmpl[i:]
		if strings.HasPrefix(tmpl, "{{") {
			lit.WriteByte('{')
			tmpl = tmpl[2:]
			continue
		}
		j := strings.IndexByte(tmpl, '}')
		if j < 0 {
			t.Fatalf("unterminated placeholder in %q", tmpl)
		}
		ph := tmpl[1:j]
		tmpl = tmpl[j+1:]
		flush()
		switch {
		case ph == "u64":
			out = append(out, elem{kind: u64Elem})
		case strings.HasPrefix(ph, "u64:"):
			out = append(out, elem{kind: u64Elem, name: ph[4:]})
		case ph == "line":
			out = append(out, elem{kind: lineElem})
		case ph == "stats":
			out = append(out, elem{kind: statsElem})
		case ph == "sp":
			out = append(out, elem{kind: spacesElem})
		default:
			t.Fatalf("unknown placeholder {%s}", ph)
		}
	}
	flush()
	return out
}

type matchResult uint8

const (
	needMore matchResult = iota
	matched
	mismatch
)

// match tells whether got is exactly the reply described by elems, a
// beginning of it (needMore), or neither; caps receives captured values.
func match(elems []elem, got []byte, caps map[string]string) (matchResult, string) {
	i := 0
	for _, e := range elems {
		rest := got[i:]
		switch e.kind {
		case litElem:
			n := min(len(e.lit), len(rest))
			if string(rest[:n]) != e.lit[:n] {
				return mismatch, fmt.Sprintf("at byte %d: expected %q", i, e.lit)
			}
			if n < len(e.lit) {
				return needMore, ""
			}
			i += n
		case u64Elem:
			j := 0
			for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
				j++
			}
			if j == len(rest) {
				return needMore, ""
			}
			if j == 0 || j > 20 {
				return mismatch, fmt.Sprintf("at byte %d: expected a decimal number", i)
			}
			if e.name != "" {
				caps[e.name] = string(rest[:j])
			}
			i += j
		case lineElem:
			j := bytes.IndexAny(rest, "\r\n")
			if j < 0 {
				return needMore, ""
			}
			i += j
		case spacesElem:
			j := 0
			for j < len(rest) && rest[j] == ' ' {
				j++
			}
			if j == len(rest) {
				return needMore, ""
			}
			i += j
		case statsElem:
			lines := 0
			for {
				rest = got[i:]
				if !bytes.HasPrefix(rest, []byte("STAT ")) {
					if len(rest) < 5 && bytes.HasPrefix([]byte("STAT "), rest) {
						return needMore, ""
					}
					break
				}
				j := bytes.Index(rest, []byte("\r\n"))
				if j < 0 {
					return needMore, ""
				}
				if f := strings.Fields(string(rest[:j])); len(f) < 3 {
					return mismatch, fmt.Sprintf("at byte %d: malformed stats line %q", i, rest[:j])
				}
				i += j + 2
				lines++
			}
			if lines == 0 {
				return mismatch, fmt.Sprintf("at byte %d: expected STAT lines", i)
			}
		}
	}
	if i < len(got) {
		return mismatch, fmt.Sprintf("%d unexpected bytes after the reply", len(got)-i)
	}
	return matched, ""
}

// TestMatcher pins the template mechanism itself.
func TestMatcher(t *testing.T) {
	tests := []struct {
		tmpl, got string
		want      matchResult
	}{
		{"END\r\n", "END\r\n", matched},
		{"END\r\n", "EN", needMore},
		{"END\r\n", "", needMore},
		{"END\r\n", "ERROR\r\n", mismatch},
		{"END\r\n", "END\r\nX", mismatch},
		{"", "", matched},
		{"", "X", mismatch},
		{"VALUE k 0 1 {u64:c}\r\n", "VALUE k 0 1 123", needMore},
		{"VALUE k 0 1 {u64:c}\r\n", "VALUE k 0 1 123\r\n", matched},
		{"VALUE k 0 1 {u64}\r\n", "VALUE k 0 1 \r\n", mismatch},
		{"VALUE k 0 1 {u64}\r\n", "VALUE k 0 1 x\r\n", mismatch},
		{"VERSION {line}\r\n", "VERSION 1.6.18\r\n", matched},
		{"VERSION {line}\r\n", "VERSION 1.6", needMore},
		{"{stats}END\r\n", "STAT pid 1\r\nSTAT uptime 2\r\nEND\r\n", matched},
		{"{stats}END\r\n", "STAT pid 1\r\nST", needMore},
		{"{stats}END\r\n", "STAT pid 1\r\nEND", needMore},
		{"{stats}END\r\n", "END\r\n", mismatch},
		{"{stats}END\r\n", "STAT pid\r\nEND\r\n", mismatch},
		{"9{sp}\r\n", "9  \r\n", matched},
		{"9{sp}\r\n", "9\r\n", matched},
		{"9{sp}\r\n", "9 x\r\n", mismatch},
		{"{{x}", "{x}", matched},
	}
	for _, tt := range tests {
		caps := map[string]string{}
		res, why := match(compile(t, tt.tmpl), []byte(tt.got), caps)
		if res != tt.want {
			t.Errorf("match(%q, %q) = %d (%s), want %d", tt.tmpl, tt.got, res, why, tt.want)
		}
	}
	caps := map[string]string{}
	res, _ := match(compile(t, "A {u64:c} B\r\n"), []byte("A 42 B\r\n"), caps)
	if res != matched || caps["c"] != "42" {
		t.Errorf("capture: %d %v", res, caps)
	}
	vars := map[string]string{"c": "42"}
	if got := expand(t, "cas {p}a {$c} {p:12}", "pre_", vars); got != "cas pre_a 42 pre_kkkkkkkk" {
		t.Errorf("expand: %q", got)
	}
}

// TestConformanceMemcached runs the suite against the real memcached, the
// reference every expected reply was taken from.
func TestConformanceMemcached(t *testing.T) {
	needMemcached(t)
	runConformance(t, startMemcached(t, memcachedBin))
}

// memcachedBin is the reference server, from Debian's memcached package.
const memcachedBin = "/usr/bin/memcached"

// needMemcached skips t where the reference server is not installed (and
// fails it in CI, which installs it).
func needMemcached(t *testing.T) {
	t.Helper()
	needProgram(t, memcachedBin, "memcached")
}

// needProgram returns the path of the program name (a command looked up in
// PATH, or a path), or skips t where it is not installed. Under .ci/run
// (KVD_REQUIRE_REFERENCE set) it fails t instead: .ci/run installs every
// program these tests compare kvd against, and a skip there would pass
// without the comparison made. Not on CI alone: `make test` on a fresh
// machine with only Go must pass, whatever its environment says.
func needProgram(t *testing.T, name, debianPkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv(requireReferenceEnv) != "" {
			t.Fatalf("%s is not installed (%v); .ci/run installs Debian's %s", name, err, debianPkg)
		}
		t.Skipf("%s is not installed (Debian: apt-get install %s): %v", name, debianPkg, err)
	}
	return path
}

// requireReferenceEnv, set by .ci/run, turns a missing reference program
// into a failure.
const requireReferenceEnv = "KVD_REQUIRE_REFERENCE"

// TestConformanceAddr runs the suite against any running server named by
// KVD_CONFORMANCE_ADDR (host:port), e.g. a kvd or memcached started by hand.
func TestConformanceAddr(t *testing.T) {
	addr := os.Getenv("KVD_CONFORMANCE_ADDR")
	if addr == "" {
		t.Skip("set KVD_CONFORMANCE_ADDR=host:port to run the conformance suite against that server")
	}
	runConformance(t, addr)
}

// startMemcached starts memcached on an ephemeral loopback port, with extra
// arguments if any, and stops it (by PID) at cleanup. Readiness is
// memcached's own "server listening" line (printed at -vv), not a timer.
func startMemcached(t *testing.T, bin string, extra ...string) string {
	for attempt := 0; attempt < 5; attempt++ {
		port := freePort(t)
		args := append([]string{"-l", "127.0.0.1", "-p", port, "-U", "0", "-vv"}, extra...)
		if os.Geteuid() == 0 {
			args = append(args, "-u", "root") // memcached refuses root without -u
		}
		cmd := exec.Command(bin, args...)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout = io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatalf("start memcached: %v", err)
		}
		ready := make(chan bool, 1)
		var tail tailBuffer
		go func() {
			sc := bufio.NewScanner(stderr)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			signalled := false
			for sc.Scan() {
				tail.add(sc.Text())
				if !signalled && strings.Contains(sc.Text(), "server listening") {
					ready <- true
					signalled = true
				}
			}
			if !signalled {
				ready <- false // memcached exited (port taken?) before listening
			}
			_, _ = io.Copy(io.Discard, stderr)
		}()
		if <-ready {
			pid := cmd.Process.Pid
			t.Cleanup(func() {
				_ = cmd.Process.Kill() // this PID only
				_ = cmd.Wait()
				if t.Failed() {
					t.Logf("memcached (pid %d) stderr tail:\n%s", pid, tail.String())
				}
			})
			return "127.0.0.1:" + port
		}
		_ = cmd.Wait()
		t.Logf("memcached did not start on port %s (attempt %d):\n%s", port, attempt+1, tail.String())
	}
	t.Fatal("could not start memcached")
	return ""
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// tailBuffer keeps the last lines of a process's output for diagnostics.
type tailBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (b *tailBuffer) add(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, s)
	if len(b.lines) > 50 {
		b.lines = b.lines[len(b.lines)-50:]
	}
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n")
}
