#!/bin/sh
# scripts/fuzz.sh: build Cistern's libFuzzer targets and run each one.
#
#   scripts/fuzz.sh [SECONDS]        build, then run every target SECONDS
#                                    (default 30) from a copy of its corpus
#   scripts/fuzz.sh --build-only     build only (what `make fuzz` runs)
#   FUZZ_TARGETS="request push" scripts/fuzz.sh 60    a subset
#
# Environment: CLANG (default: clang), FUZZ_OUT (build dir, default
# ./fuzz-build), SRCDIR (default: this script's ..), CONFIG_H_DIR (where
# config.h is: default the current directory if it has one, else SRCDIR),
# FUZZ_JOBS (targets run in parallel, default 1), FUZZ_CFLAGS (extra flags:
# -DFUZZ_KNOWN_BUGS tolerates the reported, not yet fixed bugs).
#
# Each target is compiled from t/fuzz/fuzz_X.c together with the sources it
# exercises (not the Makefile's libraries: they are built by the configured
# compiler without coverage), with -fsanitize=fuzzer,address,undefined.  A run
# works on a temporary copy of t/fuzz/corpus/X, so the checked-in corpus
# never grows by itself; crashes, leaks and timeouts are written to
# $FUZZ_OUT/artifacts/X/ and the script exits 1 if any target found one.
set -u

SECONDS_PER=30
BUILD_ONLY=0
case "${1:-}" in
    --build-only) BUILD_ONLY=1 ;;
    "") ;;
    *[!0-9]*) echo "usage: $0 [SECONDS | --build-only]" >&2; exit 2 ;;
    *) SECONDS_PER=$1 ;;
esac

SRCDIR=${SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
CLANG=${CLANG:-clang}
FUZZ_OUT=${FUZZ_OUT:-$PWD/fuzz-build}
# The targets run from their own work directories: paths must be absolute.
mkdir -p "$FUZZ_OUT"
FUZZ_OUT=$(cd "$FUZZ_OUT" && pwd)
if [ -z "${CONFIG_H_DIR:-}" ]; then
    if [ -f "$PWD/config.h" ]; then CONFIG_H_DIR=$PWD; else CONFIG_H_DIR=$SRCDIR; fi
fi
FUZZ_JOBS=${FUZZ_JOBS:-1}
ALL="request response push conf_records conf_remap conf_ip_allow conf_ip_allow_yaml conf_storage cachectl record pp h2"
TARGETS=${FUZZ_TARGETS:-$ALL}

if ! command -v "$CLANG" >/dev/null 2>&1; then
    echo "fuzz: $CLANG not found (apt-get install clang libclang-rt-dev)" >&2
    exit 77
fi
if [ ! -f "$CONFIG_H_DIR/config.h" ]; then
    echo "fuzz: no config.h in $CONFIG_H_DIR: run configure first" >&2
    exit 2
fi

CFLAGS="-g -O1 -Wall -Wextra -Werror -Wno-unused-parameter -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
-fno-sanitize-recover=undefined -I$CONFIG_H_DIR -I$SRCDIR ${FUZZ_CFLAGS:-}"

S=$SRCDIR
HTTP="$S/worker/http.c"
CONF=$(echo "$S"/conf/*.c)

sources() {
    case $1 in
        request|response|push) echo "$HTTP" ;;
        cachectl) echo "$HTTP $S/worker/buf.c $S/worker/cachectl.c" ;;
        conf_*) echo "$CONF" ;;
        record) echo "$S"/cache/*.c ;;
        pp) echo "$S/worker/pp.c" ;;
        h2) echo "$HTTP $S/worker/buf.c $S/worker/h2head.c" ;;
    esac
}
libs() {
    case $1 in
        request|response|push|cachectl) echo "-lhttp_parser" ;;
        h2) echo "-lhttp_parser -lnghttp2" ;;
        record) echo "-llmdb -lpthread" ;;
        conf_*) echo "-lssl -lcrypto -lyaml" ;;
        *) echo "" ;;
    esac
}

mkdir -p "$FUZZ_OUT"
fail=0
for t in $TARGETS; do
    # shellcheck disable=SC2046
    if ! $CLANG $CFLAGS -o "$FUZZ_OUT/fuzz_$t" "$S/t/fuzz/fuzz_$t.c" $(sources "$t") $(libs "$t"); then
        echo "fuzz: build of fuzz_$t failed" >&2
        exit 2
    fi
done
echo "fuzz: built $(echo $TARGETS | wc -w) targets in $FUZZ_OUT"
[ $BUILD_ONLY = 1 ] && exit 0

run_one() {
    t=$1
    work=$(mktemp -d "${TMPDIR:-/tmp}/cistern-fuzz-$t.XXXXXX")
    art="$FUZZ_OUT/artifacts/$t"
    rm -rf "$art"
    mkdir -p "$work/corpus" "$art"
    [ -d "$S/t/fuzz/corpus/$t" ] && cp "$S/t/fuzz/corpus/$t"/* "$work/corpus/" 2>/dev/null
    dict=""
    [ -f "$S/t/fuzz/$t.dict" ] && dict="-dict=$S/t/fuzz/$t.dict"
    (cd "$work" && "$FUZZ_OUT/fuzz_$t" -max_total_time="$SECONDS_PER" -timeout=10 \
        -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
        -artifact_prefix="$art/" $dict corpus >"$work/log" 2>&1)
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
    if [ $rc -ne 0 ] || ls "$art" | grep -q .; then
        echo "FAIL fuzz_$t (rc $rc, ${execs:-?} runs); artifacts in $art; log tail:"
        tail -40 "$work/log" | sed 's/^/    /'
        rm -rf "$work"
        return 1
    fi
    echo "PASS fuzz_$t (${SECONDS_PER}s, ${execs:-?} runs)"
    rm -rf "$work"
    return 0
}

if [ "$FUZZ_JOBS" -le 1 ]; then
    for t in $TARGETS; do
        run_one "$t" || fail=1
    done
else
    pids=""
    for t in $TARGETS; do
        run_one "$t" > "$FUZZ_OUT/result-$t" 2>&1 &
        pids="$pids $!"
        while [ "$(jobs -p | wc -l)" -ge "$FUZZ_JOBS" ]; do sleep 1; done
    done
    for p in $pids; do wait "$p"; done
    for t in $TARGETS; do
        cat "$FUZZ_OUT/result-$t"
        grep -q '^FAIL' "$FUZZ_OUT/result-$t" && fail=1
    done
fi
exit $fail
