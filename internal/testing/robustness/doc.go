// Package robustness owns kvd's fault-injection harness: it starts real kvd
// processes on loopback (a Topology: 3 data members, sometimes a single
// node, or two data members and a witness), drives memcache traffic at the
// data members from several sequential clients (by id%3: text, client.go;
// binary, binclient.go; or meta, metaclient.go), injects one fault per run
// (SIGKILL, SIGSTOP, network partitions, delay, connection resets,
// snapshots, membership changes, crashes at failpoints, a skewed clock, a
// slow disk), heals, and then checks three properties:
//
//   - every key's history is linearizable (porcupine, with the models in
//     model.go: register, CAS, add/replace and counter operations share one
//     per-key model), a write whose outcome is unknown may or may not have
//     happened, a failed read is dropped;
//   - no acknowledged write is lost: after healing, every key is read on
//     every data member through linearizable reads, and those reads are
//     part of the checked history;
//   - replicas converge: once every node reports the same applied index,
//     local reads of every key give the same digest on every data member.
//
// Runs of a clock fault also run the expiry probe (expiry.go): keys with
// a short lifetime, read before and after their expiry and judged by the
// harness's own clock; an item served late or hidden early fails the run.
//
// A witness (witness.go) holds no data, so it gets no client request and
// no digest; the run checks instead that it is a voter marked witness,
// refuses data, holds no item and never led.
//
// Peer traffic goes through a Network of TCP proxies owned by this package,
// one in front of each node's peer listener; the nodes' --initial-cluster
// addresses point at the proxies. A proxy learns the sending node from the
// 32-byte hello that opens every peer connection, so it can cut, delay or
// reset one ordered pair of nodes.
//
// A run passes only if the checker decided every key (porcupine timing
// out on one makes the run "undecided") and the run showed it exercised
// its fault: traffic before, during and after it, and the effect its kind
// must have (vacuity.go); otherwise it is "vacuous". Both fail.
//
// A secured run (Config.Secure; make robustness SECURE=1) gives every
// member TLS on its client ports, mutual TLS between members and an auth
// file; clients dial with TLS and log in first, and each proxy terminates
// the peer TLS to read the hello (secure.go).
//
// Faults are entries of a registry (fault.go); adding one is adding an
// entry. Only the robustness test (go test ./internal/testing/robustness, make
// robustness) calls this package. On a failed run it writes the history,
// porcupine's visualisation and the node logs to an artifacts directory.
package robustness
