#!/usr/bin/env bash
# What the witness hold costs (docs/witness.md, internal/replica/witnessgate.go):
# writes through the data members of a local cluster of two data members and
# a witness, for each kvd binary given, alternating ROUNDS times so that the
# machine's noise falls on both alike. Prints kvd bench's summary per run.
#
#   OLD=/tmp/kvd-before NEW=bin/kvd bench/witnessgate.sh
#   ROUNDS=3 DURATION=10s OLD=… NEW=… bench/witnessgate.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-2}
duration=${DURATION:-8s}
conc=${CONCURRENCY:-1,8}
[ -x "${OLD:-}" ] && [ -x "${NEW:-}" ] || { echo "set OLD and NEW to two kvd binaries" >&2; exit 1; }
command -v curl >/dev/null || { echo "witnessgate.sh needs curl" >&2; exit 1; }
members="n1=127.0.0.1:12691,n2=127.0.0.1:12692,n3=127.0.0.1:12693"
declare -A pid
dir=$(mktemp -d)
stop() {
  for p in "${pid[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pid=()
}
trap 'stop; rm -rf "$dir"' EXIT INT TERM
run() { # label binary
  rm -rf "$dir/n1" "$dir/n2" "$dir/n3"
  for i in 1 2 3; do
    "$2" serve --name "n$i" --data-dir "$dir/n$i" \
      --memcache-addr "127.0.0.1:1261$i" --http-addr "127.0.0.1:1268$i" \
      --peer-addr "127.0.0.1:1269$i" --initial-cluster "$members" --initial-witnesses n3 \
      >>"$dir/n$i.log" 2>&1 &
    pid[$i]=$!
  done
  for i in 1 2 3; do
    for _ in $(seq 1 300); do curl -fsS "http://127.0.0.1:1268$i/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
  done
  echo "== $1 ($2)"
  "$2" bench --servers 127.0.0.1:12611,127.0.0.1:12612 --workload custom --get-set 0:1 --value-size 100 \
    --keys 10000 --concurrency "$conc" --duration "$duration" --progress never 2>&1 | grep -E "phase|^ +run " || true
  stop
}
for _ in $(seq 1 "$rounds"); do
  run before "$OLD"
  run after "$NEW"
done
