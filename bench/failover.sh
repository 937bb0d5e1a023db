#!/usr/bin/env bash
# Client-observed failover of a local 3-node kvd cluster with the default
# timeouts: ROUNDS times, a write load runs over all three nodes, the leader
# is killed with SIGKILL, the load measures the longest window without an
# acknowledged write (kvd bench --failover), and the killed node is
# restarted before the next round. Prints one line per kill and the median
# and worst gap; writes the per-round JSON under $OUT.
#
# With WITNESS=1, n3 is a witness (docs/witness.md): the load runs over the
# two data members, and the one that leads is killed each round.
#
#   make build && bench/failover.sh            # 5 kills
#   WITNESS=1 bench/failover.sh                # two data members and a witness
#   ROUNDS=10 EXTRA="--election-timeout 1s" bench/failover.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${KVD_BIN:-bin/kvd}
rounds=${ROUNDS:-5}
out=${OUT:-bench/out/failover}
extra=${EXTRA:-}
servers=127.0.0.1:12411,127.0.0.1:12412,127.0.0.1:12413
if [ "${WITNESS:-0}" = 1 ]; then
  extra="$extra --initial-witnesses n3"
  servers=127.0.0.1:12411,127.0.0.1:12412
fi
[ -x "$bin" ] || { echo "build kvd first: make build" >&2; exit 1; }
for tool in curl jq; do
  command -v "$tool" >/dev/null || { echo "failover.sh needs $tool (apt-get install $tool)" >&2; exit 1; }
done
mkdir -p "$out"
members="n1=127.0.0.1:12491,n2=127.0.0.1:12492,n3=127.0.0.1:12493"
declare -A pid
start() {
  local i=$1
  # shellcheck disable=SC2086
  "$bin" serve --name "n$i" --data-dir "$dir/n$i" \
    --memcache-addr "127.0.0.1:1241$i" --http-addr "127.0.0.1:1248$i" \
    --peer-addr "127.0.0.1:1249$i" --initial-cluster "$members" $extra \
    >>"$dir/n$i.log" 2>&1 &
  pid[$i]=$!
}
ready() {
  for _ in $(seq 1 300); do
    curl -fsS "http://127.0.0.1:1248$1/readyz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "n$1 not ready; log:" >&2; tail -20 "$dir/n$1.log" >&2; return 1
}
cleanup() {
  for p in "${pid[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
dir=$(mktemp -d)
trap cleanup EXIT INT TERM
for i in 1 2 3; do start "$i"; done
for i in 1 2 3; do ready "$i"; done

gaps=()
for r in $(seq 1 "$rounds"); do
  "$bin" bench --servers "$servers" \
    --workload custom --get-set 0:1 --preload=false --concurrency 6 --duration 8s --timeout 1s \
    --failover --progress never --json "$out/round$r.json" >"$out/round$r.txt" 2>&1 &
  bench=$!
  sleep 3
  lead=$(curl -fsS http://127.0.0.1:12481/v1/cluster | jq -r '.leader as $l | .members[] | select(.id == $l) | .name')
  i=${lead#n}
  if [ -z "$i" ] || [ -z "${pid[$i]:-}" ]; then
    echo "round $r: no leader known to n1 (got \"$lead\"); its log ends:" >&2; tail -20 "$dir/n1.log" >&2; exit 1
  fi
  kill -KILL "${pid[$i]}"
  wait "${pid[$i]}" 2>/dev/null || true
  wait "$bench" || true
  gap=$(jq -r '[.. | objects | select(has("longest_gap_ms")) | .longest_gap_ms] | max' "$out/round$r.json")
  echo "round $r: killed leader $lead; longest window without an acknowledged write: ${gap} ms"
  gaps+=("$gap")
  start "$i"
  for j in 1 2 3; do ready "$j"; done
done
printf '%s\n' "${gaps[@]}" | sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "kills: %d  median gap: %.0f ms  worst: %.0f ms\n", NR, m, a[NR]}'
