#!/usr/bin/env bash
# Issue 2's speed and memory targets for a single kvd node, measured side by
# side with memcached on this machine in one run, with the same load
# generator (kvd bench) sharing the cores with the servers. Writes
# bench/RESULTS-core.md. Needs: memcached (apt-get install memcached),
# python3 (to read the JSON reports). Every case is bounded in time.
#   bench/core.sh            # 10 s per case
#   DUR=3s PAIRS=1 PAIR_DUR=2s bench/core.sh     # a smoke run
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${DUR:-10s}
out=bench/RESULTS-core.md
work=$(mktemp -d /tmp/kvd-core.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT INT TERM

make build >/dev/null
# Read before the report is written: writing it dirties the tree.
version=$(git describe --always --dirty)
bin=bin/kvd
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# memcached's memory (-m, MiB): half the machine's, so that it keeps every
# item of a case rather than evict (see the pairs below). 4096 was enough
# while memcached took 8 KiB sets at 30-40k/s; at 60-80k/s it filled them
# within a 10 s case and evicted a third of what it was given. Each run's
# evictions are read back and reported beside the ratios.
mc_mb=$(awk '/MemTotal/{print int($2/2048)}' /proc/meminfo)
start_memcached() {
  mcport=$(free_port)
  memcached -l 127.0.0.1 -p "$mcport" -U 0 -m "$mc_mb" -c 4096 -t 2 $( [ "$(id -u)" = 0 ] && echo -u root ) &
  mcpid=$!; pids+=("$mcpid")
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$mcport") 2>/dev/null && return; sleep 0.05; done
  echo "core.sh: memcached on 127.0.0.1:$mcport did not start within 5 s" >&2; exit 1
}
start_kvd() {
  kport=$(free_port); hport=$(free_port)
  rm -rf "$work/kvd"
  "$bin" serve --name n1 --data-dir "$work/kvd" --memcache-addr "127.0.0.1:$kport" \
    --http-addr "127.0.0.1:$hport" --log-level warn >"$work/kvd.log" 2>&1 &
  kpid=$!; pids+=("$kpid")
  for _ in $(seq 200); do curl -fsS "127.0.0.1:$hport/readyz" >/dev/null 2>&1 && return; sleep 0.05; done
  echo "core.sh: kvd was not ready within 10 s; its log ends:" >&2; tail -n 20 "$work/kvd.log" >&2; exit 1
}
# bench NAME ADDR ARGS… → ops/s of the run phase (first concurrency) into $work/NAME.json
bench() {
  local name=$1 addr=$2; shift 2
  # A failed run is reported, not fatal: the report says which figures it
  # lacks. Its output is gone with $work afterwards, so its end is shown.
  "$bin" bench --servers "$addr" --progress never --duration "$DUR" --json "$work/$name.json" "$@" >"$work/$name.txt" 2>&1 ||
    { echo "core.sh: bench run $name failed; its output ends:" >&2; tail -n 5 "$work/$name.txt" >&2; }
}
ops() { python3 - "$work/$1.json" "${2:-0}" <<'PY'
import json,sys
d=json.load(open(sys.argv[1])); i=int(sys.argv[2])
runs=[c for c in d["cases"] if c["phase"]=="run"]
print("%.0f" % runs[i]["runs"][0]["ops_per_sec"])
PY
}
p50() { python3 - "$work/$1.json" "${2:-0}" <<'PY'
import json,sys
d=json.load(open(sys.argv[1])); i=int(sys.argv[2])
runs=[c for c in d["cases"] if c["phase"]=="run"]
print("%.0fµs" % runs[i]["runs"][0]["latency"]["p50_us"])
PY
}
rss_kb() { awk '/VmRSS/{print $2}' "/proc/$1/status"; }

# The disk as the cases find it and as they leave it: kvd's write rates
# follow its fsync latency, which drifts within the hour on shared VMs.
go build -o "$work/fsyncprobe" ./bench/fsyncprobe
# probe_busy: one thread's fsyncs again, beside a spin loop that keeps
# another CPU busy. On this project's VMs an fsync's I/O often takes
# longer then, up to twice as long, and an 8-connection write run keeps
# the CPUs busy where a 1-connection one does not (bench/RESULTS-core.md).
probe_busy() {
  [ "$(nproc)" -ge 2 ] || return 0
  timeout 60 sh -c 'while :; do :; done' >/dev/null 2>&1 &
  local spin=$!
  sleep 0.2 # the loop running before the first fsync
  "$work/fsyncprobe" -dir "$work" -threads 1 | sed 's/^fsync probe: /beside a busy CPU: /'
  kill "$spin" 2>/dev/null || true
  wait "$spin" 2>/dev/null || true
}
disk_before=$("$work/fsyncprobe" -dir "$work" -threads 1,8; probe_busy)

start_memcached; start_kvd
MC=127.0.0.1:$mcport; KV=127.0.0.1:$kport
echo "memcached $MC (pid $mcpid), kvd $KV (pid $kpid), $DUR per case"

# Each case runs on memcached and then at once on kvd, so that the two
# rates of a ratio are measured minutes apart at most, not the whole
# sequence apart.
both() { local name=$1; shift; bench "mc-$name" "$MC" "$@"; bench "kv-$name" "$KV" "$@"; }
both membrain --workload membrain --concurrency 64 --seed 1
both write8k --workload keyspace-write --concurrency 64 --seed 2
both write --workload custom --get-set 0:1 --keys 1000000 --key-dist seq \
     --key-size 32 --value-size 512 --preload=false --concurrency 1,8,32 --seed 3
both read --workload custom --get-set 1:0 --keys 10000 --key-dist uniform \
     --key-size 32 --value-size 512 --concurrency 1,32 --seed 4

# Write scaling again, as alternating pairs on the same node: the
# 1-connection rate follows this disk's fsync latency, which drifts by a
# quarter within minutes (bench/RESULTS-core.md), so the one pair in the
# sequence above can land anywhere in that range. The median of PAIRS
# pairs, each 1 connection then 8 for PAIR_DUR, is the figure judged
# against the target; every pair is printed beside it.
# Around each run, kvd's raft log counters and its CPU time are read, so
# that the report says what each pair's ratio is made of: the fsync's
# mean time, the writes one fsync covered, and kvd's CPU per write.
PAIRS=${PAIRS:-5}; PAIR_DUR=${PAIR_DUR:-5s}
# kvd_probe: fsync seconds, fsyncs, synced entries, synced batches (raft
# log metrics), then kvd's CPU time in clock ticks.
kvd_probe() {
  curl -fsS "127.0.0.1:$hport/metrics" | awk '
    $1 == "kvd_raft_log_fsync_duration_seconds_sum" {s = $2}
    $1 == "kvd_raft_log_fsync_duration_seconds_count" {c = $2}
    $1 == "kvd_raft_log_synced_entries_total" {e = $2}
    $1 == "kvd_raft_log_synced_batches_total" {b = $2}
    END {printf "%s %s %s %s ", s, c, e, b}'
  awk '{print $14 + $15}' "/proc/$kpid/stat"
}
for i in $(seq "$PAIRS"); do
  for c in 1 8; do
    before=$(kvd_probe)
    DUR=$PAIR_DUR bench "kv-pair$i-$c" "$KV" --workload custom --get-set 0:1 --keys 1000000 --key-dist seq \
          --key-size 32 --value-size 512 --preload=false --concurrency "$c" --seed "$((10 + i))"
    echo "$before $(kvd_probe)" >"$work/kv-pair$i-$c.probe"
  done
done

disk_after=$("$work/fsyncprobe" -dir "$work" -threads 1,8; probe_busy)

# The two ratio targets again, as alternating pairs: memcached's own
# rate moved by a third between runs within the hour
# (bench/RESULTS-core.md), as much as the margins, so one measurement of
# each server can land anywhere in that range. The median of PAIRS pair
# ratios (each run DUR, as in the sequence) is the figure judged against
# the target; every pair is printed beside it. Odd pairs run memcached
# first, even pairs kvd first, so a drift in the machine's speed during a
# pair favours neither. Every run has a fresh server to itself, started
# after the page cache's dirty pages are written out (sync) and stopped
# when its run ends. With both servers of a pair running through it,
# each was slower when it ran second: kvd's 8 KiB sets by about a
# quarter after memcached's, and memcached's after kvd's, while the
# kernel was still writing back kvd's dirty pages. Run alone, each
# still is, by less (bench/RESULTS-core.md), which the alternating order
# evens out. And a memcached that has filled its memory (-m) evicts
# and reuses it, and then took unique 8 KiB sets over twice as fast as
# while it still kept every one (16–20k/s against 44–47k/s): the target
# compares two servers that both keep what they were given.
kill "$mcpid" "$kpid"; wait "$mcpid" "$kpid" 2>/dev/null || true
# alone WHO NAME ARGS…: one bench run on a fresh server of its own.
alone() {
  local who=$1 name=$2 addr pid; shift 2
  sync
  if [ "$who" = mc ]; then start_memcached; addr=127.0.0.1:$mcport; pid=$mcpid
  else start_kvd; addr=127.0.0.1:$kport; pid=$kpid; fi
  bench "$who-$name" "$addr" "$@"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
for i in $(seq "$PAIRS"); do
  order="mc kv"; [ $((i % 2)) = 0 ] && order="kv mc"
  for who in $order; do alone "$who" "membrain-pair$i" --workload membrain --concurrency 64 --seed 1; done
  for who in $order; do alone "$who" "write8k-pair$i" --workload keyspace-write --concurrency 64 --seed 2; done
done

# Memory: fresh servers (the cases above left data behind), 1 M items of
# 512 bytes in each, then the resident set size.
start_memcached; start_kvd
MC=127.0.0.1:$mcport; KV=127.0.0.1:$kport
for who in mc kv; do
  addr=$MC; pid=$mcpid; [ $who = kv ] && { addr=$KV; pid=$kpid; }
  "$bin" bench --servers "$addr" --progress never --workload import --records 1000000 \
     --value-size 512 --key-size 32 --concurrency 32 --duration 600s --json "$work/$who-import.json" >"$work/$who-import.txt" 2>&1 || true
  eval "${who}_rss=$(rss_kb "$pid")"
done

ratio() { python3 -c "print('%.2f' % ($1/$2))"; }
# pair_parts I: one line on write-scaling pair I from its probes and reports.
pair_parts() {
  python3 - "$1" "$work" "$(getconf CLK_TCK)" <<'PY'
import json, sys
i, work, hz = sys.argv[1], sys.argv[2], float(sys.argv[3])
def part(c):
    p = [float(x) for x in open("%s/kv-pair%s-%d.probe" % (work, i, c)).read().split()]
    s, n, e, b, t = (p[5 + k] - p[k] for k in range(5))
    d = json.load(open("%s/kv-pair%s-%d.json" % (work, i, c)))
    run = [x for x in d["cases"] if x["phase"] == "run"][0]["runs"][0]
    ops, rate = run["ops"], run["ops_per_sec"]
    fsync, per = 1e6 * s / max(n, 1), e / max(b, 1)
    # One fsync's round: its batch over the write rate. What is left
    # after the fsync is the writers' turnaround (reply, the client's
    # next request, its proposal) and the apply.
    between = 1e6 * per / max(rate, 1) - fsync
    return fsync, per, between, 1e6 * t / hz / max(ops, 1)
try:
    f1, _, g1, cpu1 = part(1)
    f8, per8, g8, cpu8 = part(8)
except (OSError, ValueError, IndexError, KeyError) as e:
    # A run that failed leaves no report or too few counters: say so
    # rather than lose the rest of the report.
    print("- pair %s: its parts could not be read (%s)" % (i, e))
    sys.exit(0)
print("- pair %s: fsync %.0f µs at 1 connection, %.0f µs at 8; %.1f writes per fsync at 8; "
      "between fsyncs %.0f µs at 1, %.0f µs at 8; kvd CPU %.0f µs per write at 1, %.0f µs at 8"
      % (i, f1, f8, per8, g1, g8, cpu1, cpu8))
PY
}
{
  echo "# Single-node kvd vs memcached (issue 2 targets)"
  echo
  echo "Produced by \`bench/core.sh\` (DUR=$DUR per case) on $(date -u +%Y-%m-%d), $(nproc) cores shared by"
  echo "the servers and the load generator (\`kvd bench\`), $(memcached -h | head -1), kvd $version."
  echo "Every kvd write is fsynced in the Raft log before its reply. The disk (\`bench/fsyncprobe\`: 3,000-byte"
  echo "writes, each followed by fdatasync, by 1 and by 8 threads at once, and by 1 beside a spin loop that keeps another CPU busy)"
  echo "before the cases and after the write-scaling pairs:"
  echo
  echo "$disk_before" | sed 's/^fsync probe: /- before: /; s/^beside/- before: beside/'
  echo "$disk_after" | sed 's/^fsync probe: /- after: /; s/^beside/- after: beside/'
  echo
  echo "| case | memcached ops/s | kvd ops/s | kvd / memcached | target |"
  echo "|---|---:|---:|---:|---|"
  m=$(ops mc-membrain); k=$(ops kv-membrain)
  echo "| membrain: 9:1 get:set, 250 B keys, 512 B values, 5 % misses, 64 conns | $m | $k | $(ratio $k $m) | ≥ 0.6 (the median of the pairs below) |"
  m=$(ops mc-write8k); k=$(ops kv-write8k)
  echo "| unique-key sets, 8 KiB values, 64 conns | $m | $k | $(ratio $k $m) | ≥ 0.4 (the median of the pairs below) |"
  for i in 0 1 2; do
    c=(1 8 32); m=$(ops mc-write $i); k=$(ops kv-write $i)
    echo "| 512 B sets, ${c[$i]} conn(s) (p50 kvd $(p50 kv-write $i), memcached $(p50 mc-write $i)) | $m | $k | $(ratio $k $m) | |"
  done
  for i in 0 1; do
    c=(1 32); m=$(ops mc-read $i); k=$(ops kv-read $i)
    echo "| 512 B gets, ${c[$i]} conn(s) (p50 kvd $(p50 kv-read $i), memcached $(p50 mc-read $i)) | $m | $k | $(ratio $k $m) | |"
  done
  echo
  # pairs_summary WHAT LEGEND JOIN TARGET "A B"…: every pair's B / A and
  # their median, the figure judged against TARGET; JOIN sits between A
  # and B, and LEGEND says what they are.
  pairs_summary() {
    python3 - "$@" <<'PY'
import statistics, sys
what, legend, join, target = sys.argv[1:5]
pairs = [tuple(map(float, p.split())) for p in sys.argv[5:]]
ratios = [b / a for a, b in pairs]
print("%s in %d alternating pairs (%s): %s;" % (what, len(pairs), legend,
    " · ".join("%.0f%s%.0f (%.2f)" % (a, join, b, b / a) for a, b in pairs)))
print("median %.2f, range %.2f–%.2f (target: median %s)." % (
    statistics.median(ratios), min(ratios), max(ratios), target))
PY
  }
  for t in "membrain ≥ 0.6" "write8k ≥ 0.4"; do
    name=${t%% *} pairs=()
    for i in $(seq "$PAIRS"); do pairs+=("$(ops "mc-$name-pair$i") $(ops "kv-$name-pair$i")"); done
    pairs_summary "$name" "memcached ops/s, kvd ops/s, kvd / memcached" ", " "${t#* }" "${pairs[@]}"
    echo
  done
  w1=$(ops kv-write 0); w8=$(ops kv-write 1)
  echo "kvd write scaling (group commit), in the sequence above: 8 connections / 1 connection = $(ratio $w8 $w1)."
  echo
  pairs=()
  for i in $(seq "$PAIRS"); do pairs+=("$(ops "kv-pair$i-1") $(ops "kv-pair$i-8")"); done
  pairs_summary "kvd write scaling" "1 connection, then 8" " → " "≥ 5" "${pairs[@]}"
  echo
  echo "What each pair is made of (kvd's own counters over each run): the raft log fsync's mean time"
  echo "at 1 and at 8 connections, the writes one fsync covered at 8 (at most 8), the rest of each fsync's"
  echo "round (batch / rate − fsync: the replies, the clients' next requests, the apply), and kvd's CPU"
  echo "per write. The ratio is (writes per fsync) × (fsync + between at 1) / (fsync + between at 8):"
  echo
  for i in $(seq "$PAIRS"); do pair_parts "$i"; done
  echo
  echo "Resident memory holding 1,000,000 items of 512 bytes: memcached $((mc_rss/1024)) MiB,"
  echo "kvd $((kv_rss/1024)) MiB (defaults: Pebble block cache 64 MiB \`--cache-size\`, item cache 64 MiB"
  echo "\`--item-cache-size\`, a 32 MiB memtable for the data; the Raft log is in 64 MiB segment files, not in memory); kvd / memcached ="
  echo "$(ratio $kv_rss $mc_rss) (target ≤ 1)."
  echo
  # Every ratio assumes memcached kept what it was given (-m above).
  evicted=$(grep -H -o 'after the run:.*evictions=[0-9]*' "$work"/mc-*.txt | sed -E 's#^.*/(mc-[^.]*)\.txt:.*evictions=#\1 #' | awk '$2 > 0 {printf "%s%s: %s", sep, $1, $2; sep=", "}' || true)
  echo "memcached ran with -m $mc_mb (MiB); items it evicted: ${evicted:-none, in every run}."
} > "$work/report.md"
# Moved into place only when whole: a run that stops midway (set -e) must
# not leave $out truncated.
cp "$work/report.md" "$out"
cat "$out"
