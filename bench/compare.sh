#!/usr/bin/env bash
# bench/compare.sh — run the same workloads against memcached, a 3-member
# etcd, and kvd (1 node, 3 nodes) on this machine, one system at a time,
# and write bench/RESULTS.md as ratios kvd/memcached and kvd/etcd next to
# the exact command that produced them. See bench/METHOD.md.
#
# Every server is started fresh for every workload, on loopback ports, with
# its data under one temporary directory; the trap stops exactly the PIDs
# this script started and removes the directory.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: bench/compare.sh [options]

  --quick               smoke run: 2s per case, concurrency 1,4, one repetition, 5000 import
                        records, 5000 membrain keys
  --duration D          length of each case (default 15s, as in the Keyspace test)
  --concurrency LIST    sweep (default 1,2,4,6,8)
  --repeat N            repetitions of each case, averaged (default 5)
  --records N           records of the import workload (default 100000)
  --import-limit D      upper bound of each import phase (default 300s)
  --workloads "W ..."   default: keyspace-write keyspace-read keyspace-bulk membrain import
  --systems "S ..."     default: memcached etcd kvd-1 kvd-3
  --out FILE            default: bench/RESULTS.md
  --keep                keep the temporary directory (data, logs, JSON reports)
  -h, --help            this text
EOF
}

DURATION=15s
CONCURRENCY=1,2,4,6,8
REPEAT=5
RECORDS=100000
IMPORT_LIMIT=300s
MEMBRAIN_KEYS= # empty: the preset's 50000
WORKLOADS="keyspace-write keyspace-read keyspace-bulk membrain import"
SYSTEMS="memcached etcd kvd-1 kvd-3"
OUT=bench/RESULTS.md
KEEP=0
COMMAND="bench/compare.sh"
for a in "$@"; do
	if [[ $a =~ ^[A-Za-z0-9_./,:=+-]+$ ]]; then COMMAND+=" $a"; else COMMAND+=" $(printf '%q' "$a")"; fi
done

while [[ $# -gt 0 ]]; do
	case "$1" in
	--quick) DURATION=2s CONCURRENCY=1,4 REPEAT=1 RECORDS=5000 IMPORT_LIMIT=20s MEMBRAIN_KEYS=5000 ;;
	--duration) DURATION=$2; shift ;;
	--concurrency) CONCURRENCY=$2; shift ;;
	--repeat) REPEAT=$2; shift ;;
	--records) RECORDS=$2; shift ;;
	--import-limit) IMPORT_LIMIT=$2; shift ;;
	--workloads) WORKLOADS=$2; shift ;;
	--systems) SYSTEMS=$2; shift ;;
	--out) OUT=$2; shift ;;
	--keep) KEEP=1 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "compare.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
	esac
	shift
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvd-compare.XXXXXX")
RES="$WORK/reports"
mkdir -p "$RES"
PIDS=()

# stop_started stops the servers this script started (by PID, never by
# name): SIGTERM, then SIGKILL for any still alive after 10 s.
stop_started() {
	local pid i
	for pid in "${PIDS[@]:-}"; do
		[[ -n $pid ]] && kill "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]:-}"; do
		[[ -n $pid ]] || continue
		for ((i = 0; i < 100; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	PIDS=()
}

cleanup() {
	stop_started
	if [[ $KEEP == 1 ]]; then
		echo "kept $WORK"
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '[compare %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# free_port sets PORT to a loopback port nobody listens on and that this
# script has not handed out yet (not in a subshell: it records the port).
# Ports come from below the kernel's ephemeral range, so an outgoing
# connection of one server cannot take a port another is about to bind.
USED_PORTS=" "
PORT=
EPHEMERAL_LOW=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
((EPHEMERAL_LOW > 12000)) || EPHEMERAL_LOW=32768
free_port() {
	local p i
	for ((i = 0; i < 200; i++)); do
		p=$((10000 + RANDOM % (EPHEMERAL_LOW - 10000)))
		[[ $USED_PORTS == *" $p "* ]] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			USED_PORTS+="$p "
			PORT=$p
			return 0
		fi
	done
	echo "compare.sh: no free port found" >&2
	return 1
}

# wait_tcp ADDR SECONDS: wait until something accepts on ADDR.
wait_tcp() {
	local host=${1%:*} port=${1##*:} deadline=$((SECONDS + $2))
	while ((SECONDS < deadline)); do
		if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	return 1
}

# wait_http URL SECONDS PID: wait until URL answers 2xx; give up early
# when process PID has exited.
wait_http() {
	local deadline=$((SECONDS + $2))
	while ((SECONDS < deadline)); do
		if curl -sf -o /dev/null --max-time 2 "$1"; then return 0; fi
		kill -0 "$3" 2>/dev/null || return 1
		sleep 0.2
	done
	return 1
}

# WHY holds the reason the last start_* failed (for the .skipped file).
WHY=
failed_start() { # failed_start WHAT LOGFILE: the first panic or fatal line, else the last line
	local line
	line=$(grep -m1 -E '^panic:|"level":"fatal"|level=ERROR|invalid configuration' "$2" || true)
	[[ -n $line ]] || line=$(grep -v '^[[:space:]]*$' "$2" | tail -1 || true)
	WHY="$1: $(printf '%s' "$line" | tr -d '|' | cut -c1-240)"
	log "$WHY"
	return 1
}

skip() { # skip SYSTEM REASON
	log "skipping $1: $2"
	echo "$2" >"$RES/$1.skipped"
}

log "building bin/kvd"
# make build stamps the commit into the binary, which the table's version
# column then names.
make build >/dev/null
KVD=$ROOT/bin/kvd
if ! "$KVD" bench --help >/dev/null 2>&1; then
	echo "compare.sh: bin/kvd has no bench command" >&2
	exit 1
fi

declare -A ENABLED=()
for s in $SYSTEMS; do ENABLED[$s]=1; done
disable() { # disable SYSTEM REASON
	if [[ -n ${ENABLED[$1]:-} ]]; then
		skip "$1" "$2"
		unset "ENABLED[$1]"
	fi
}
command -v memcached >/dev/null || disable memcached "memcached is not installed (apt-get install -y memcached)"
command -v etcd >/dev/null || disable etcd "etcd is not installed (apt-get install -y etcd-server)"
if ! "$KVD" serve --help >/dev/null 2>&1; then
	disable kvd-1 "this build of kvd has no serve command yet"
	disable kvd-3 "this build of kvd has no serve command yet"
fi

# start_memcached: one process, 2 worker threads (the machine has 2 cores).
start_memcached() {
	local p
	free_port
	p=$PORT
	local user=()
	[[ $(id -u) == 0 ]] && user=(-u root)
	memcached -l 127.0.0.1 -p "$p" -U 0 -m 2048 -t 2 -c 4096 "${user[@]}" >"$WORK/memcached.log" 2>&1 &
	PIDS+=($!)
	wait_tcp "127.0.0.1:$p" 10 || { failed_start "memcached did not start" "$WORK/memcached.log"; return 1; }
	TARGET=memcache SERVERS="127.0.0.1:$p"
}

# start_etcd: three members on loopback, data under $WORK/etcd-N.
start_etcd() {
	local i cluster="" clients=() peers=() pids=() token="kvd-compare-$$-$RANDOM"
	for i in 1 2 3; do
		free_port
		clients[i]=$PORT
		free_port
		peers[i]=$PORT
		cluster+="${cluster:+,}e$i=http://127.0.0.1:${peers[i]}"
	done
	for i in 1 2 3; do
		rm -rf "$WORK/etcd-$i"
		etcd --name "e$i" --data-dir "$WORK/etcd-$i" \
			--listen-client-urls "http://127.0.0.1:${clients[i]}" --advertise-client-urls "http://127.0.0.1:${clients[i]}" \
			--listen-peer-urls "http://127.0.0.1:${peers[i]}" --initial-advertise-peer-urls "http://127.0.0.1:${peers[i]}" \
			--initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token "$token" \
			--quota-backend-bytes $((8 * 1024 * 1024 * 1024)) --logger zap --log-outputs stderr \
			>"$WORK/etcd-$i.log" 2>&1 &
		PIDS+=($!)
		pids[i]=$!
	done
	SERVERS=""
	for i in 1 2 3; do
		wait_http "http://127.0.0.1:${clients[i]}/health" 30 "${pids[i]}" || { failed_start "etcd member e$i not healthy" "$WORK/etcd-$i.log"; return 1; }
		SERVERS+="${SERVERS:+,}127.0.0.1:${clients[i]}"
	done
	TARGET=etcd
}

# start_kvd N: N kvd nodes on loopback, data under $WORK/kvd-N.
start_kvd() {
	local n=$1 i cluster="" mc=() http=() peer=() pids=()
	for ((i = 1; i <= n; i++)); do
		free_port
		mc[i]=$PORT
		free_port
		http[i]=$PORT
		free_port
		peer[i]=$PORT
		cluster+="${cluster:+,}n$i=127.0.0.1:${peer[i]}"
	done
	for ((i = 1; i <= n; i++)); do
		rm -rf "$WORK/kvd-$i"
		"$KVD" serve --name "n$i" --data-dir "$WORK/kvd-$i" --memcache-addr "127.0.0.1:${mc[i]}" \
			--http-addr "127.0.0.1:${http[i]}" --peer-addr "127.0.0.1:${peer[i]}" --initial-cluster "$cluster" \
			>"$WORK/kvd-$i.log" 2>&1 &
		PIDS+=($!)
		pids[i]=$!
	done
	SERVERS=""
	for ((i = 1; i <= n; i++)); do
		if ! wait_http "http://127.0.0.1:${http[i]}/readyz" 60 "${pids[i]}"; then
			failed_start "kvd node n$i not ready" "$WORK/kvd-$i.log"
			return 1
		fi
		SERVERS+="${SERVERS:+,}127.0.0.1:${mc[i]}"
	done
	TARGET=memcache
}

start_system() {
	case "$1" in
	memcached) start_memcached ;;
	etcd) start_etcd ;;
	kvd-1) start_kvd 1 ;;
	kvd-3) start_kvd 3 ;;
	*) log "unknown system $1"; return 1 ;;
	esac
}

STATUS=0
for w in $WORKLOADS; do
	for s in $SYSTEMS; do
		[[ -n ${ENABLED[$s]:-} ]] || continue
		log "$w on $s: starting"
		if ! start_system "$s"; then
			disable "$s" "did not start for $w: $WHY"
			stop_started
			STATUS=1
			continue
		fi
		duration=$DURATION
		[[ $w == import ]] && duration=$IMPORT_LIMIT # import runs until every record is written and read
		args=(bench --target "$TARGET" --servers "$SERVERS" --workload "$w" --concurrency "$CONCURRENCY"
			--duration "$duration" --repeat "$REPEAT" --timeout 10s --progress never
			--json "$RES/${s}__${w}.json")
		if [[ $w == import ]]; then args+=(--records "$RECORDS"); fi
		if [[ $w == membrain && -n $MEMBRAIN_KEYS ]]; then args+=(--keys "$MEMBRAIN_KEYS"); fi
		log "$w on $s: kvd ${args[*]}"
		if ! "$KVD" "${args[@]}" >"$RES/${s}__${w}.txt" 2>&1; then
			log "$w on $s: bench failed"
			STATUS=1
		fi
		sed -n '/phase/,/^$/p' "$RES/${s}__${w}.txt" >&2
		stop_started
	done
done

MACHINE="$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $(uname -sr), $(go env GOVERSION), $(date -u +%Y-%m-%dT%H:%MZ)"
go run ./bench/results -dir "$RES" -out "$OUT" -command "$COMMAND" -machine "$MACHINE" -kvd-version "$("$KVD" version)" \
	-systems "$(echo "$SYSTEMS" | tr ' ' ',')" -workloads "$(echo "$WORKLOADS" | tr ' ' ',')"
log "wrote $OUT"
exit "$STATUS"
