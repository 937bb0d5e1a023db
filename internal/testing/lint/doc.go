// Package lint holds kvd's architecture rules as tests (import boundaries,
// determinism of the state machine). It has no production code.
package lint
