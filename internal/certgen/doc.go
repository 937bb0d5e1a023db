// Package certgen owns the making of kvd's X.509 material: a self-signed CA
// and the certificates it issues to members and clients, as PEM, with ECDSA
// P-256 keys and nothing but the standard library.
//
// It exists because kvd's container image is FROM scratch: there is no
// openssl in it, so `kvd certs` (internal/cli) is how compose files and
// Kubernetes jobs make a secured cluster's certificates. The package only
// builds bytes and writes files; it keeps no state and is safe to call from
// any goroutine. What a member checks in a peer's certificate (the member
// name as a DNS name or common name, the CA, the usages) is decided in
// internal/config and the TLS code; this package issues what they expect.
package certgen
