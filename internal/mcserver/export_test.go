package mcserver

import "testing"

// GatChunk is gatChunk, for the black-box tests.
const GatChunk = gatChunk

// SetGatProbe has f called as every gat chunk s's connections propose,
// with its keys and the keys of its connection's gat chunks proposed and
// not yet written (its own included), until the test ends.
func SetGatProbe(tb testing.TB, s *Server, f func(keys, held int)) {
	s.gatProbe.Store(&f)
	tb.Cleanup(func() { s.gatProbe.Store(nil) })
}
