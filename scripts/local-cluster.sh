#!/usr/bin/env bash
# Start a local 3-node kvd cluster on loopback for trying kvd and for
# benchmarks. Ctrl-C (or SIGTERM) stops the three nodes it started, by PID.
# Data lives under ${KVD_CLUSTER_DIR:-./kvd-cluster}; a second run restarts
# the same cluster from its data.
set -euo pipefail
bin=${KVD_BIN:-bin/kvd}
dir=${KVD_CLUSTER_DIR:-./kvd-cluster}
[ -x "$bin" ] || { echo "build kvd first: make build" >&2; exit 1; }
members="n1=127.0.0.1:11291,n2=127.0.0.1:11292,n3=127.0.0.1:11293"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait; }
trap cleanup EXIT INT TERM
for i in 1 2 3; do
  mkdir -p "$dir/n$i"
  "$bin" serve --name "n$i" --data-dir "$dir/n$i" \
    --memcache-addr "127.0.0.1:1121$i" --http-addr "127.0.0.1:1128$i" \
    --peer-addr "127.0.0.1:1129$i" --initial-cluster "$members" \
    >"$dir/n$i.log" 2>&1 &
  pids+=($!)
done
# Ready = log replayed and a leader known. A node that did not get there
# (a port in use, a bad data dir) fails the script, with its log.
for i in 1 2 3; do
  ready=
  for _ in $(seq 1 100); do
    if "$bin" healthcheck --url "http://127.0.0.1:1128$i/readyz" --timeout 1s >/dev/null 2>&1; then
      ready=1
      break
    fi
    sleep 0.1
  done
  if [ -z "$ready" ]; then
    echo "n$i is not ready after 10s; its log, $dir/n$i.log, ends:" >&2
    tail -n 20 "$dir/n$i.log" >&2
    exit 1
  fi
done
echo "kvd 3-node cluster is up (logs in $dir/n*.log):"
echo "  memcache: 127.0.0.1:11211 127.0.0.1:11212 127.0.0.1:11213"
echo "  http:     http://127.0.0.1:11281 http://127.0.0.1:11282 http://127.0.0.1:11283"
echo "Ctrl-C stops all three."
wait
