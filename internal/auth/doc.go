// Package auth owns kvd's credentials source: the htpasswd file named by
// --auth-file (bcrypt hashes only, as `htpasswd -B` writes them), loaded
// into memory, checked by Verify, and reloaded when it changes (Reload, and
// Run's poll of the file) or when the node asks (SIGHUP).
//
// The memcache sessions (internal/memcache) call Verify from each
// connection's reader goroutine, and the HTTP API from its handlers; Verify
// and Reload are safe for concurrent use. Run is one goroutine per Store,
// started by the node for its lifetime.
//
// # Why Verify remembers successes and not failures
//
// bcrypt is slow on purpose (about 50-250 ms at the usual costs). Hundreds
// of clients reconnecting at once with the same credentials (a deploy, a
// failover) would otherwise pay one bcrypt per connection, seconds of CPU
// during which the server answers nothing. So a verified (user, password)
// pair is remembered, under a keyed SHA-256 of the pair (a random key per
// process: the plaintext is never kept, and the digest is useless outside
// the process), until the file changes; concurrent checks of the same pair
// wait for the first one instead of each running bcrypt.
//
// A failed attempt is never remembered: every guess costs a bcrypt, so
// guessing stays as slow as bcrypt makes it. What bounds a flood of wrong
// guesses is a semaphore of runtime.NumCPU() bcrypt runs at a time, so that
// the flood queues behind itself rather than taking every core from the
// requests of authenticated clients. An unknown user costs a bcrypt too
// (against a hash of the file's highest cost), so that timing does not tell
// which users exist.
//
// Failures are logged through Failed, at most one line a second, with the
// count of the lines left out: a password-guessing client must not turn
// into a disk-filling one. Neither passwords nor hashes are ever logged,
// nor put in an error.
package auth
