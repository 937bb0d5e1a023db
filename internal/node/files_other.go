//go:build !(linux || darwin || freebsd)

package node

// fileLimit is not known on this system: the state store keeps Pebble's
// default bound on open files.
func fileLimit() uint64 { return 0 }
