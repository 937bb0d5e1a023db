#!/usr/bin/env bash
# Issue 3's speed targets: a 3-node kvd cluster against a 3-member etcd
# (Debian's etcd-server), both on this machine's loopback, measured in one
# run with the same load generator (kvd bench) and the same sizes: 250-byte
# keys (memcached's limit; etcd gets the same keys) and 512-byte values.
# Clients spread their connections over all three members of each system;
# the one-connection latency cases run once against the leader and once
# against a follower of each, so both systems are compared role for role.
# Writes bench/RESULTS-cluster.md. Needs etcd (apt-get install etcd-server)
# and python3. Every case is bounded in time.
#   bench/cluster.sh             # 10 s per case
#   DUR=3s bench/cluster.sh      # a smoke run
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${DUR:-10s}
out=bench/RESULTS-cluster.md
work=$(mktemp -d /tmp/kvd-cluster.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT INT TERM

make build >/dev/null
bin=bin/kvd
command -v etcd >/dev/null || { echo "cluster.sh: etcd is not installed (apt-get install etcd-server)" >&2; exit 1; }
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }

# wait_ok URL LOG: until URL answers 2xx, for 15 s; else the member's log
# and the end of the run, rather than a report of failed cases.
wait_ok() {
  for _ in $(seq 150); do curl -fsS "$1" >/dev/null 2>&1 && return; sleep 0.1; done
  echo "cluster.sh: $1 did not answer within 15 s; $2 ends:" >&2; tail -n 20 "$2" >&2; exit 1
}
start_etcd() {
  local i cluster="" token="kvd-cluster-$$-$RANDOM"; local -a cp pp
  for i in 1 2 3; do cp[i]=$(free_port); pp[i]=$(free_port); cluster+="${cluster:+,}e$i=http://127.0.0.1:${pp[i]}"; done
  for i in 1 2 3; do
    etcd --name "e$i" --data-dir "$work/etcd-$i" \
      --listen-client-urls "http://127.0.0.1:${cp[i]}" --advertise-client-urls "http://127.0.0.1:${cp[i]}" \
      --listen-peer-urls "http://127.0.0.1:${pp[i]}" --initial-advertise-peer-urls "http://127.0.0.1:${pp[i]}" \
      --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token "$token" \
      --quota-backend-bytes $((8 << 30)) --logger zap --log-outputs stderr >"$work/etcd-$i.log" 2>&1 &
    pids+=($!)
  done
  servers=""
  for i in 1 2 3; do
    wait_ok "http://127.0.0.1:${cp[i]}/health" "$work/etcd-$i.log"
    servers+="${servers:+,}127.0.0.1:${cp[i]}"
  done
  roles "etcd_server_is_leader 1" "127.0.0.1:${cp[1]}=http://127.0.0.1:${cp[1]}" \
        "127.0.0.1:${cp[2]}=http://127.0.0.1:${cp[2]}" "127.0.0.1:${cp[3]}=http://127.0.0.1:${cp[3]}"
  target=etcd
}
start_kvd() {
  local i cluster=""; local -a mp hp pp
  for i in 1 2 3; do mp[i]=$(free_port); hp[i]=$(free_port); pp[i]=$(free_port); cluster+="${cluster:+,}n$i=127.0.0.1:${pp[i]}"; done
  for i in 1 2 3; do
    "$bin" serve --name "n$i" --data-dir "$work/kvd-$i" --memcache-addr "127.0.0.1:${mp[i]}" \
      --http-addr "127.0.0.1:${hp[i]}" --peer-addr "127.0.0.1:${pp[i]}" --initial-cluster "$cluster" \
      --log-level warn >"$work/kvd-$i.log" 2>&1 &
    pids+=($!)
  done
  servers=""
  for i in 1 2 3; do
    wait_ok "http://127.0.0.1:${hp[i]}/readyz" "$work/kvd-$i.log"
    servers+="${servers:+,}127.0.0.1:${mp[i]}"
  done
  roles "kvd_raft_is_leader 1" "127.0.0.1:${mp[1]}=http://127.0.0.1:${hp[1]}" \
        "127.0.0.1:${mp[2]}=http://127.0.0.1:${hp[2]}" "127.0.0.1:${mp[3]}=http://127.0.0.1:${hp[3]}"
  target=memcache
}
# roles LEADER-METRIC-LINE CLIENT-ADDR=METRICS-URL… → $leader and $follower,
# the client addresses of the leader and of another member, so that the
# one-connection cases compare the same role of both systems.
roles() {
  local line=$1 i; shift
  local -a members=("$@")
  leader=""
  for _ in $(seq 100); do
    for i in "${!members[@]}"; do
      if curl -fsS "${members[i]#*=}/metrics" 2>/dev/null | grep -q "^$line\$"; then
        leader=${members[i]%%=*}; follower=${members[(i + 1) % ${#members[@]}]%%=*}
      fi
    done
    [ -n "$leader" ] && return
    sleep 0.1
  done
  echo "cluster.sh: no leader found" >&2; exit 1
}
# bench NAME ARGS… → $work/NAME.json
bench() {
  local name=$1; shift
  "$bin" bench --target "$target" --servers "${srv:-$servers}" --progress never --duration "$DUR" --timeout 10s \
    --key-size 250 --value-size 512 --json "$work/$name.json" "$@" >"$work/$name.txt" 2>&1 ||
    { echo "cluster.sh: bench run $name failed; its output ends:" >&2; tail -n 5 "$work/$name.txt" >&2; }
}
field() { python3 - "$work/$1.json" "$2" "$3" <<'PY'
import json,sys
d=json.load(open(sys.argv[1])); i=int(sys.argv[2]); f=sys.argv[3]
r=[c for c in d["cases"] if c["phase"]=="run"][i]["runs"][0]
print("%.0f" % (r["ops_per_sec"] if f=="ops" else r["latency"][f]))
PY
}

for who in etcd kvd; do
  "start_$who"
  echo "$who: $servers, $DUR per case"
  bench "$who-set" --workload custom --get-set 0:1 --keys 10000000 --key-dist seq --preload=false --concurrency 1,64 --seed 1
  srv=$leader bench "$who-set1-leader" --workload custom --get-set 0:1 --keys 10000000 --key-dist seq --preload=false --concurrency 1 --seed 4
  srv=$follower bench "$who-set1-follower" --workload custom --get-set 0:1 --keys 10000000 --key-dist seq --preload=false --concurrency 1 --seed 5
  bench "$who-get" --workload custom --get-set 1:0 --keys 10000 --key-dist uniform --concurrency 1,64 --seed 2
  bench "$who-mix" --workload custom --get-set 9:1 --keys 10000 --key-dist uniform --concurrency 64 --seed 3
  stop_all
done

ratio() { python3 -c "print('%.2f' % ($1/$2))"; }
us() { python3 -c "v=$1; print('%.0f µs' % v if v < 10000 else '%.1f ms' % (v/1000))"; }
{
  echo "# 3-node kvd vs 3-member etcd (issue 3 targets)"
  echo
  echo "Produced by \`bench/cluster.sh\` (DUR=$DUR per case) on $(date -u +%Y-%m-%d), $(nproc) cores shared by the"
  echo "three servers under test (one system at a time) and the load generator (\`kvd bench\`), $(etcd --version | head -1),"
  echo "kvd $(git describe --always --dirty). 250-byte keys, 512-byte values; connections spread over the"
  echo "three members; kvd reads are linearizable (ReadIndex), etcd's are its default (linearizable)."
  echo "Every write of both is fsynced on a quorum before its reply."
  echo
  echo "| case | etcd ops/s | kvd ops/s | kvd / etcd | target |"
  echo "|---|---:|---:|---:|---|"
  for i in 0 1; do
    c=(1 64); e=$(field etcd-set $i ops); k=$(field kvd-set $i ops)
    t=""; [ "$i" = 1 ] && t="≥ 5"
    echo "| sets, ${c[$i]} conn(s) | $e | $k | $(ratio "$k" "$e") | $t |"
  done
  for i in 0 1; do
    c=(1 64); e=$(field etcd-get $i ops); k=$(field kvd-get $i ops)
    echo "| linearizable gets, ${c[$i]} conn(s) | $e | $k | $(ratio "$k" "$e") | |"
  done
  e=$(field etcd-mix 0 ops); k=$(field kvd-mix 0 ops)
  echo "| 9:1 get:set, 64 conns | $e | $k | $(ratio "$k" "$e") | ≥ 8 |"
  echo
  echo "One connection's set p50 (target: kvd / etcd ≤ 0.5), with the client on the same role in both systems:"
  echo
  for role in leader follower; do
    e=$(field "etcd-set1-$role" 0 p50_us); k=$(field "kvd-set1-$role" 0 p50_us)
    echo "- at the $role: kvd $(us "$k"), etcd $(us "$e"); kvd / etcd = $(ratio "$k" "$e")."
  done
  echo
  echo "(The \"sets, 1 conn\" row above used the first member listed, whichever role it had.)"
  e=$(field etcd-set 1 p99_us); k=$(field kvd-set 1 p99_us)
  echo "64 connections' set p99: kvd $(us "$k"), etcd $(us "$e")."
} >"$work/report.md"
# Moved into place only when whole: a run that stops midway (set -e) must
# not leave $out truncated.
cp "$work/report.md" "$out"
cat "$out"
