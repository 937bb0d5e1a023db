// Package lint holds kvd's architecture rules as tests: import boundaries
// (only replica runs the raft algorithm, only raftlog, fsm and durable use
// Pebble, listeners reach kv only, mcproto imports nothing internal, no
// production package imports internal/testing), the determinism of the
// state machine, and the Makefile's FUZZ_TARGETS agreeing with the fuzz
// targets in the tree. It has no production code; `go test` (make test)
// runs it, and it finds the repository root from its own source file.
package lint
