#!/usr/bin/env bash
# Meta commands beside their text twins on one node: mg v against get, ms
# against set, 64 requests in flight on one connection (the memcache
# package's pipelined benchmarks). The pairs run alternately, ROUNDS times,
# so that the machine's drift falls on both alike; benchstat prints the
# medians. Usage: bench/meta.sh [ROUNDS] (default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for _ in $(seq "$rounds"); do
	for b in Get MetaGet Set MetaSet; do
		go test -run '^$' -bench "BenchmarkPipelined${b}\$" -benchtime=2s -count=1 ./internal/memcache/ |
			grep '^Benchmark' >>"$out/all.txt"
	done
done
sed -e 's/PipelinedMeta\(Get\|Set\)/Pipelined\1/' <(grep Meta "$out/all.txt") >"$out/meta.txt"
grep -v Meta "$out/all.txt" >"$out/text.txt"
if command -v benchstat >/dev/null; then
	benchstat text="$out/text.txt" meta="$out/meta.txt"
elif [ -x "$HOME/go/bin/benchstat" ]; then
	"$HOME/go/bin/benchstat" text="$out/text.txt" meta="$out/meta.txt"
else
	cat "$out/all.txt"
fi
