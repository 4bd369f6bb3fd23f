#!/usr/bin/env bash
# scripts/bench-zipf.sh: hit ratio of plain FIFO vs S3-FIFO eviction on a
# Zipf(0.9) trace over ten times more objects than fit in the store.
#
# Compiles scripts/bench-zipf.c against the cache sources (cache/*.c and
# shm/log.c, -O2, no sanitizers) into a temporary directory and runs
# it; every argument is passed through (bench-zipf -h lists them).
# Deterministic: a fixed seed (-S) gives the same trace and the same
# numbers on any run.  A benchmark, not a test: it never fails on numbers.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[[ -f $top/config.h ]] || { echo "bench-zipf: run ./configure first (config.h)" >&2; exit 1; }
# shellcheck disable=SC2046 # word splitting of pkg-config output is intended
gcc -std=gnu11 -O2 -Wall -Wextra -Werror -I"$top" -include "$top/config.h" \
    "$top/scripts/bench-zipf.c" "$top"/cache/*.c "$top/shm/log.c" \
    -llmdb -lpthread -lm -o "$tmp/bench-zipf"
"$tmp/bench-zipf" -d "$tmp" "$@"
