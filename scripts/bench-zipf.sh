#!/usr/bin/env bash
# scripts/bench-zipf.sh: hit ratio of plain FIFO vs S3-FIFO eviction on a
# Zipf(0.9) trace over ten times more objects than fit in the store.
#
# Builds scripts/bench-zipf (scripts/bench-zipf.c linked against the cache
# layer, libcache.a and those below, with the build's own flags: configure's
# default -O2; an --enable-asan build gives a slower bench) with make in the
# build directory ($CISTERN_BUILD, else the source tree) and runs it on a
# store in a temporary directory; every argument is passed through
# (bench-zipf -h lists them).
# Deterministic: a fixed seed (-S) gives the same trace and the same
# numbers on any run.  A benchmark, not a test: it never fails on numbers.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CISTERN_BUILD:-$top}
[[ -f $build/Makefile ]] || { echo "bench-zipf: no configured build in $build (run ./configure, or set CISTERN_BUILD)" >&2; exit 1; }
make -s -C "$build" scripts/bench-zipf >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/scripts/bench-zipf" -d "$tmp" "$@"
