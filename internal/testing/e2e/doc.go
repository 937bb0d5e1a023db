// Package e2e holds end-to-end tests that run real kvd processes over real
// sockets with real Pebble directories. It has no production code.
package e2e
