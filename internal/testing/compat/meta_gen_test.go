package compat

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// metaNext draws a meta command for the seeded differential (diffGen.meta):
// mg, ms, md or ma with a random subset of the flags each takes, in random
// order, now and then a malformed or duplicated one; me; mn; or a malformed
// meta line. It never draws E or x: memcached 1.6.18 rejects them as
// invalid flags and kvd takes them (newer memcached's), which
// TestMetaNewerFlagsKvd covers. Times follow diffGen.exptime's rule (0, far
// away or past, never a few seconds), and R's are kept clear of every TTL
// drawn (metaRecache), so that no reply depends on the moment it is read.
func (g *diffGen) metaNext() diffCmd {
	switch n := g.r.IntN(100); {
	case n < 28:
		return g.metaGet()
	case n < 54:
		return g.metaSet()
	case n < 67:
		return g.metaDelete()
	case n < 80:
		// Never pipelined (isArith), as incr and decr: see counterFault.
		return g.metaArith()
	case n < 85:
		key, b := g.metaKey()
		if b {
			key += " b"
		}
		return diffCmd{pre: "me " + key + "\r\n"}
	case n < 89:
		return diffCmd{pre: g.pick("mn", "mn", "mn extra") + "\r\n"}
	default:
		return g.metaMalformed()
	}
}

// metaKey draws a meta command's key token: usually one of key()'s (which
// are now and then over-long or hold control bytes), now and then a pool
// key in base64 (b: the command carries the b flag), or with b a token that
// does not decode.
func (g *diffGen) metaKey() (tok string, b bool) {
	switch {
	case g.chance(0.12):
		return base64.StdEncoding.EncodeToString([]byte(g.poolKey())), true
	case g.chance(0.01):
		return g.pick("abc", "!!!!"), true // a length that is no multiple of 4; no base64 byte at all
	}
	return g.key(), false
}

// opaque draws an O flag's token: up to 32 bytes are echoed, 33 are an
// error.
func (g *diffGen) opaque() string {
	return "O" + g.pick("", "1", "abc", "opaque9", strings.Repeat("o", 32), strings.Repeat("o", 33))
}

// opaqueAfterEffect draws the O token of an mg or ma, never too long:
// memcached 1.6.18 finds such a token only after the command took effect
// and was counted, where kvd refuses it first (metaDeliberate in
// meta_diff_test.go pins both).
func (g *diffGen) opaqueAfterEffect() string {
	return "O" + g.pick("", "1", "abc", "opaque9", strings.Repeat("o", 31), strings.Repeat("o", 30))
}

// metaRecache draws an R flag's time. An R wins when the item's expiry comes
// before now+R; an R equal to a TTL drawn elsewhere (1000, 5000, 2592000)
// would win or not by the second in which each server read it, so these lie
// well clear of them: 30 is under all, 2000 over 1000 only, 3000000 over
// all.
func (g *diffGen) metaRecache() string {
	if g.chance(0.9) {
		return g.pick("30", "2000", "3000000", "0", "-1")
	}
	return g.pick("abc", "", "1x")
}

// metaJunk draws a malformed flag token: one no command knows, one whose
// number does not parse, an M of the wrong length. Never E or x (metaNext).
func (g *diffGen) metaJunk() string {
	return g.pick("z", "y", "5", "!", "T", "Tabc", "T1x", "C", "Cx", "C-1", "F-1", "Fx", "Nx", "Rx",
		"D", "Dx", "D-1", "J", "Jx", "MSS", "M")
}

// metaFlags adds to toks, now and then, a malformed token, a duplicated
// one, or enough tokens for "options flags too long" (18 after the key,
// past memcached's 17).
func (g *diffGen) metaFlags(toks []string) []string {
	switch {
	case g.chance(0.06):
		toks = append(toks, g.metaJunk())
	case g.chance(0.03) && len(toks) > 0:
		toks = append(toks, toks[g.r.IntN(len(toks))])
	case g.chance(0.01):
		for len(toks) < 19 {
			toks = append(toks, "P")
		}
	}
	return toks
}

// metaCmd builds "<head> <flags…>\r\n<tail>" with the flag tokens shuffled.
// A token "C\x00" is a CAS compare whose unique is rendered per server: a
// recent one seen, or one never issued.
func (g *diffGen) metaCmd(head string, toks []string, tail string) diffCmd {
	g.r.Shuffle(len(toks), func(i, j int) { toks[i], toks[j] = toks[j], toks[i] })
	line := head
	if len(toks) > 0 {
		line += " " + strings.Join(toks, " ")
	}
	line += "\r\n" + tail
	i := strings.Index(line, "C\x00")
	if i < 0 {
		return diffCmd{pre: line}
	}
	c := diffCmd{pre: line[:i+1], post: line[i+2:], hasCas: true}
	if g.casSeen > 0 && g.chance(0.85) {
		c.casLabel = fmt.Sprintf("cas#%d", g.casSeen-g.r.IntN(min(g.casSeen, 4)))
	}
	return c
}

// some adds each of flags to toks with probability p.
func (g *diffGen) some(toks []string, p float64, flags ...string) []string {
	for _, f := range flags {
		if g.chance(p) {
			toks = append(toks, f)
		}
	}
	return toks
}

func (g *diffGen) metaGet() diffCmd {
	key, b := g.metaKey()
	var toks []string
	if b {
		toks = append(toks, "b")
	}
	toks = g.some(toks, 0.3, "c", "f", "h", "k", "l", "s", "t", "v")
	toks = g.some(toks, 0.12, "q", "u")
	toks = g.some(toks, 0.03, "P", "L", "I", "C1", "F1", "MS", "D1", "J1") // taken and ignored by mg
	if g.chance(0.2) {
		toks = append(toks, g.opaqueAfterEffect())
	}
	if g.chance(0.15) {
		toks = append(toks, "T"+g.exptime())
	}
	if g.chance(0.12) {
		toks = append(toks, "N"+g.exptime())
	}
	if g.chance(0.12) {
		toks = append(toks, "R"+g.metaRecache())
	}
	return g.metaCmd("mg "+key, g.metaFlags(toks), "")
}

func (g *diffGen) metaSet() diffCmd {
	key, b := g.metaKey()
	length, data := g.block(g.value())
	var toks []string
	if b {
		toks = append(toks, "b")
	}
	toks = g.some(toks, 0.25, "c", "k")
	toks = g.some(toks, 0.12, "q", "I")
	toks = g.some(toks, 0.03, "s", "v", "N1000", "h") // taken and ignored by ms (1.6.18)
	if g.chance(0.3) {
		toks = append(toks, "F"+g.flags())
	}
	if g.chance(0.3) {
		toks = append(toks, "T"+g.exptime())
	}
	if g.chance(0.35) {
		if g.chance(0.9) {
			toks = append(toks, "M"+g.pick("S", "E", "A", "P", "R"))
		} else {
			toks = append(toks, "M"+g.pick("s", "e", "X", "SS", ""))
		}
	}
	if g.chance(0.15) {
		toks = append(toks, g.opaque())
	}
	if g.chance(0.3) {
		toks = append(toks, "C\x00")
	} else if g.chance(0.03) {
		toks = append(toks, "C0")
	}
	return g.metaCmd("ms "+key+" "+length, g.metaFlags(toks), data)
}

func (g *diffGen) metaDelete() diffCmd {
	key, b := g.metaKey()
	var toks []string
	if b {
		toks = append(toks, "b")
	}
	toks = g.some(toks, 0.3, "I")
	toks = g.some(toks, 0.15, "k", "q")
	if g.chance(0.2) {
		toks = append(toks, "T"+g.exptime())
	}
	if g.chance(0.15) {
		toks = append(toks, g.opaque())
	}
	if g.chance(0.3) {
		toks = append(toks, "C\x00")
	}
	return g.metaCmd("md "+key, g.metaFlags(toks), "")
}

func (g *diffGen) metaArith() diffCmd {
	key, b := g.metaKey()
	var toks []string
	if b {
		toks = append(toks, "b")
	}
	toks = g.some(toks, 0.5, "v")
	toks = g.some(toks, 0.25, "t", "c", "k")
	toks = g.some(toks, 0.1, "q")
	if g.chance(0.4) {
		toks = append(toks, "D"+g.delta())
	}
	if g.chance(0.25) {
		toks = append(toks, "N"+g.exptime())
	}
	if g.chance(0.25) {
		if g.chance(0.9) {
			toks = append(toks, "J"+g.pick("0", "1", "42", "18446744073709551615"))
		} else {
			toks = append(toks, "J"+g.pick("abc", "-1", ""))
		}
	}
	if g.chance(0.15) {
		toks = append(toks, "T"+g.exptime())
	}
	if g.chance(0.3) {
		toks = append(toks, "M"+g.pick("I", "+", "D", "-", "D", "i", "x", "II"))
	}
	if g.chance(0.15) {
		toks = append(toks, g.opaqueAfterEffect())
	}
	if g.chance(0.2) {
		toks = append(toks, "C\x00")
	}
	return g.metaCmd("ma "+key, g.metaFlags(toks), "")
}

// metaMalformed draws a meta line that is wrong as a whole: no key, an
// unknown meta command, a key too long, no data length.
func (g *diffGen) metaMalformed() diffCmd {
	key := g.poolKey()
	long := g.prefix + strings.Repeat("k", 251-len(g.prefix))
	return diffCmd{pre: g.pick(
		"mg\r\n", "ms\r\n", "md\r\n", "ma\r\n", "me\r\n", "m\r\n", "mz "+key+"\r\n", "MG "+key+"\r\n",
		"mgx "+key+"\r\n", "ms "+key+"\r\n", "ms "+key+"\r\nx\r\n", "me "+long+"\r\n", "mg "+long+" v\r\n",
		"md "+long+" q\r\n", "ma "+long+"\r\n", "ms "+long+" 1\r\nx\r\n", "ms "+key+" 1 v v\r\nx\r\n",
		"mg "+key+" v v\r\n", "md "+key+" I I\r\n", "ma "+key+" z\r\n", "mg "+key+" "+strings.Repeat("O1 ", 18)+"\r\n",
	)}
}
