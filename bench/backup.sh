#!/usr/bin/env bash
# Measures `kvd snapshot save` and `kvd snapshot restore` rates on one node:
# loads N items of SIZE-byte values (kvd bench's preload), saves a snapshot
# from the node, then restores it into a fresh data dir; prints each
# command's JSON summary and the rates. Results: bench/RESULTS-backup.md.
#
#   bench/backup.sh [N] [SIZE]        (defaults 1000000 and 100)
set -euo pipefail
N=${1:-1000000}
SIZE=${2:-100}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'kill $PID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
go build -o "$WORK/kvd" "$ROOT/cmd/kvd"
KVD="$WORK/kvd"
MC=127.0.0.1:${MC_PORT:-23211}
HTTP=127.0.0.1:${HTTP_PORT:-23280}
PEER=127.0.0.1:${PEER_PORT:-23290}
"$KVD" serve --name b1 --data-dir "$WORK/data" --memcache-addr "$MC" --http-addr "$HTTP" --peer-addr "$PEER" \
	--initial-cluster "b1=$PEER" >"$WORK/serve.log" 2>&1 &
PID=$!
for _ in $(seq 100); do curl -sf "http://$HTTP/readyz" >/dev/null && break; sleep 0.1; done
echo "# loading $N items of $SIZE-byte values" >&2
"$KVD" bench --servers "$MC" --workload custom --keys "$N" --value-size "$SIZE" --key-size 16 --get-set 1:0 \
	--concurrency 8 --pipeline 32 --duration 1s --load-timeout 10m --progress never >/dev/null
curl -s "http://$HTTP/v1/stats" | head -c 0 || true
echo "# save" >&2
"$KVD" snapshot save "$WORK/b.kvdsnap" --endpoints "http://$HTTP" --json --progress-interval 5s
ls -l "$WORK/b.kvdsnap" >&2
"$KVD" snapshot status "$WORK/b.kvdsnap" >&2
echo "# restore" >&2
START=$(date +%s.%N)
"$KVD" snapshot restore "$WORK/b.kvdsnap" --data-dir "$WORK/restored" --name r1 --initial-cluster "r1=$PEER" --json
END=$(date +%s.%N)
BYTES=$(stat -c %s "$WORK/b.kvdsnap")
echo "restore wall time $(echo "$END - $START" | bc) s, $(echo "scale=1; $BYTES / 1000000 / ($END - $START)" | bc) MB/s of snapshot file"
du -sh "$WORK/data/state" "$WORK/restored/state" >&2
