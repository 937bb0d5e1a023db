#!/usr/bin/env bash
# What a witness costs beside its data members: a local cluster of two data
# members and a witness (n3) is loaded with KEYS items (default 1 M, 100-byte
# values) through the data members, then each member's resident memory
# (now, and its peak) and data dir size are printed.
#
#   make build && bench/witness.sh
#   KEYS=200000 bench/witness.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${KVD_BIN:-bin/kvd}
keys=${KEYS:-1000000}
[ -x "$bin" ] || { echo "build kvd first: make build" >&2; exit 1; }
command -v curl >/dev/null || { echo "witness.sh needs curl" >&2; exit 1; }
members="n1=127.0.0.1:12591,n2=127.0.0.1:12592,n3=127.0.0.1:12593"
declare -A pid
dir=$(mktemp -d)
cleanup() {
  for p in "${pid[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM
for i in 1 2 3; do
  "$bin" serve --name "n$i" --data-dir "$dir/n$i" \
    --memcache-addr "127.0.0.1:1251$i" --http-addr "127.0.0.1:1258$i" \
    --peer-addr "127.0.0.1:1259$i" --initial-cluster "$members" --initial-witnesses n3 \
    >>"$dir/n$i.log" 2>&1 &
  pid[$i]=$!
done
for i in 1 2 3; do
  for _ in $(seq 1 300); do curl -fsS "http://127.0.0.1:1258$i/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
done
start=$(date +%s)
"$bin" bench --servers 127.0.0.1:12511,127.0.0.1:12512 --workload custom --keys "$keys" --value-size 100 \
  --get-set 0:1 --preload --concurrency 8 --pipeline 16 --duration 1s --progress never >"$dir/bench.txt" 2>&1 ||
  { cat "$dir/bench.txt" >&2; exit 1; }
echo "loaded $keys items of 100 bytes through n1 and n2 in $(( $(date +%s) - start )) s"
sleep 2 # let the witness's log compact behind the applied index
printf '%-4s %-7s %10s %10s %12s\n' member role rss_mib peak_mib data_dir_mib
for i in 1 2 3; do
  role=data; [ "$i" = 3 ] && role=witness
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/${pid[$i]}/status")
  hwm=$(awk '/^VmHWM/ {print $2}' "/proc/${pid[$i]}/status")
  du=$(du -sk "$dir/n$i" | cut -f1)
  printf '%-4s %-7s %10.1f %10.1f %12.1f\n' "n$i" "$role" "$(echo "$rss/1024" | bc -l)" "$(echo "$hwm/1024" | bc -l)" "$(echo "$du/1024" | bc -l)"
done
items=$(curl -fsS http://127.0.0.1:12581/v1/stats | sed -n 's/.*"items":\([0-9]*\).*/\1/p')
echo "items on n1: ${items:-?}"
