// Package bench is the engine behind `kvd bench`: it drives load against
// memcached-protocol servers (a kvd cluster or plain memcached) or an etcd
// cluster, and measures what the clients saw.
//
// It owns:
//   - its own minimal memcached text-protocol client (get/set/stats/version,
//     pipelined), independent of kvd's server packages so that it measures
//     kvd and memcached with the same code;
//   - an etcd driver (go.etcd.io/etcd/client/v3) so the same workloads run
//     against etcd;
//   - the workload presets (keyspace-write, keyspace-read, keyspace-bulk,
//     membrain, import, custom) and their per-worker generators;
//   - checksummed values (--verify), a log-linear latency histogram, per-second
//     timelines and the failover window computation;
//   - the report: a text table, JSON and a self-contained HTML page.
//
// Run is called once per `kvd bench` invocation from the CLI goroutine. It
// starts one goroutine per simulated client (the "workers" of a case) plus a
// progress goroutine when a progress writer is given, and returns only after
// all of them have stopped. Every load loop is bounded by the case duration
// and by Config.MaxOps; every network wait is bounded by Config.Timeout.
package bench
