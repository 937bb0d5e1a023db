#!/usr/bin/env bash
# What TLS (and authentication) costs on one node: the same binary serves
# the same workload in three modes, alternating, ROUNDS times: plaintext,
# TLS (--cert-file), and TLS with --auth-file (each connection logs in once,
# so it costs the handshake, not the per-request path). Throughput per mode
# and the ratio to plaintext, from the same run.
#
#   make build && bench/tls.sh
#   ROUNDS=5 DURATION=10s WORKLOAD=membrain CONCURRENCY=4 bench/tls.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${KVD_BIN:-bin/kvd}
rounds=${ROUNDS:-3}
duration=${DURATION:-8s}
workload=${WORKLOAD:-membrain}
conc=${CONCURRENCY:-4}
[ -x "$bin" ] || { echo "build kvd first: make build" >&2; exit 1; }
command -v curl >/dev/null || { echo "tls.sh needs curl" >&2; exit 1; }
dir=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM
"$bin" certs cluster --out "$dir/certs" --members n1 >/dev/null
echo 'bench-password' | "$bin" certs htpasswd --file "$dir/certs/kvd.htpasswd" --user bench --password-stdin >/dev/null

run() { # mode
  local mode=$1 extra=() client=() scheme=http
  case $mode in
  tls) extra=(--cert-file "$dir/certs/n1.crt" --key-file "$dir/certs/n1.key"); client=(--cacert "$dir/certs/ca.crt"); scheme=https ;;
  tls+auth) extra=(--cert-file "$dir/certs/n1.crt" --key-file "$dir/certs/n1.key" --auth-file "$dir/certs/kvd.htpasswd")
    client=(--cacert "$dir/certs/ca.crt" --user bench:bench-password); scheme=https ;;
  esac
  rm -rf "$dir/data"
  "$bin" serve --name n1 --data-dir "$dir/data" --memcache-addr 127.0.0.1:12611 --http-addr 127.0.0.1:12681 \
    --peer-addr 127.0.0.1:12691 "${extra[@]}" >>"$dir/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do curl -kfsS "$scheme://127.0.0.1:12681/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
  "$bin" bench --servers 127.0.0.1:12611 "${client[@]}" --workload "$workload" --concurrency "$conc" \
    --duration "$duration" --progress never --json "$dir/$mode.json" >"$dir/$mode.txt" 2>&1 ||
    { cat "$dir/$mode.txt" >&2; exit 1; }
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=""
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["cases"][0]["summary"]["ops_per_sec"]["mean"])' "$dir/$mode.json"
}
printf '%-6s %12s %12s %12s %8s %8s\n' round plain_ops/s tls_ops/s tls+auth_ops/s tls/pl auth/pl
for r in $(seq 1 "$rounds"); do
  p=$(run plain); t=$(run tls); a=$(run tls+auth)
  printf '%-6s %12.0f %12.0f %12.0f %8.2f %8.2f\n' "$r" "$p" "$t" "$a" "$(echo "$t/$p" | bc -l)" "$(echo "$a/$p" | bc -l)"
done
