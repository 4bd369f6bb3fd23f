#!/usr/bin/env bash
# scripts/profile.sh: where does a request's CPU go?  Counts the worker's
# instructions per request with valgrind's callgrind (counts that do not
# depend on machine noise) and prints the total and the costliest functions.
#
# Two runs of one scenario, one with N requests and one with 6N, on one
# keep-alive connection; the difference divided by 5N is the cost of one
# request, free of start-up and shutdown.  Scenarios:
#   hit        1 KiB cache hit, access log on (the default configuration)
#   hit-nolog  the same with the access log off (logging_enabled 1)
#   proxy      1 KiB uncacheable response fetched from t/origin.py
#   hit-plugins  the hit of `hit` through a rule with headers.so
#              (set-resp) and cachekey.so (--exclude-params): the cost of
#              the plugin hooks on a hit (the build's plugins/ directory)
# With --cache, callgrind also models the caches and the misses per request
# are printed (I1mr: first-level instruction misses, the cost of code
# footprint; D1mr/D1mw: data).  With --ab the requests are the ones
# `ab -k` sends (HTTP/1.0, Connection: Keep-Alive, ApacheBench's
# User-Agent) instead of an HTTP/1.1 request.  A profiling aid: it prints,
# it never fails on a figure.
#
# Usage: scripts/profile.sh [-n N] [-t TOP] [--cache] [--ab] [SCENARIO]
#        (default: -n 1000 -t 25 hit; CISTERN_BIN names the daemon)
set -euo pipefail

n=1000 top=25 cache=0 ab=0
while [ $# -gt 0 ]; do
    case $1 in
    -n) n=$2; shift 2 ;;
    -t) top=$2; shift 2 ;;
    --cache) cache=1; shift ;;
    --ab) ab=1; shift ;;
    -h | --help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "profile: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
scenario=${1:-hit}
case $scenario in hit | hit-nolog | proxy | hit-plugins) ;; *)
    echo "profile: unknown scenario '$scenario' (hit, hit-nolog, proxy, hit-plugins)" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/common.sh
. "$here/common.sh"
bin=${CISTERN_BIN:-$here/../_build/plain/cistern}
command -v valgrind >/dev/null || { echo "profile: valgrind not installed" >&2; exit 1; }
[ -x "$bin" ] || { echo "profile: no daemon at $bin (set CISTERN_BIN)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/cistern-profile.XXXXXX")
opid=
cleanup() {
    [ -n "$opid" ] && kill "$opid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

origin=127.0.0.1:9
path=/k1
if [ "$scenario" = proxy ]; then
    python3 "$here/../t/origin.py" --port 0 --port-file "$work/oport" >/dev/null 2>&1 &
    opid=$!
    for _ in $(seq 50); do [ -s "$work/oport" ] && break; sleep 0.2; done
    origin=127.0.0.1:$(cat "$work/oport")
    path='/bytes/1024/headers?Cache-Control=no-store'
fi
logging=3
[ "$scenario" = hit-nolog ] && logging=1
if [ "$scenario" = hit-plugins ]; then
    CST_PLUGIN_DIR=$(cd "$(dirname "$bin")" && pwd)/plugins
    [ -f "$CST_PLUGIN_DIR/headers.so" ] || { echo "profile: no plugins in $CST_PLUGIN_DIR" >&2; exit 1; }
    CST_REMAP_OPTS="@plugin=headers.so @pparam=set-resp:X-Served-By:edge"
    CST_REMAP_OPTS+=" @plugin=cachekey.so @pparam=--exclude-params=utm"
    export CST_PLUGIN_DIR CST_REMAP_OPTS
fi

# run COUNT: serve COUNT requests under callgrind; leaves $work/rCOUNT/worker
run() {
    local count=$1 d=$work/r$1 port master
    cst_callgrind_start "$bin" "$d" 1 "$logging" "$origin"
    port=$(head -1 "$d/run/ports")
    master=$(cat "$d/run/cistern.pid")
    if [ "$scenario" != proxy ]; then
        "$here/push.sh" --port "$port" -H m.test --bytes 1024 --max-age 3600 "$path" >/dev/null
    fi
    python3 - "$port" "$count" "$path" "$ab" <<'EOP'
import socket, sys
port, count, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
s = socket.create_connection(("127.0.0.1", port))
if sys.argv[4] == "1":
    req = ("GET %s HTTP/1.0\r\nConnection: Keep-Alive\r\nHost: m.test\r\n"
           "User-Agent: ApacheBench/2.3\r\nAccept: */*\r\n\r\n" % path).encode()
else:
    req = ("GET %s HTTP/1.1\r\nHost: m.test\r\nUser-Agent: profile\r\n"
           "Accept: */*\r\n\r\n" % path).encode()
for _ in range(count):
    s.sendall(req)
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    body = data.split(b"\r\n\r\n", 1)[1]
    while len(body) < 1024:
        body += s.recv(65536)
s.close()
EOP
    kill "$master"
    for _ in $(seq 60); do kill -0 "$master" 2>/dev/null || break; sleep 0.5; done
    sleep 1
    # The worker is the child that ran the most instructions.
    python3 - "$d" "$master" <<'EOP'
import os, re, sys
d, master = sys.argv[1], sys.argv[2]
best = None
for f in os.listdir(d):
    if not f.startswith("cg.") or f[3:] == master:
        continue
    for line in open(os.path.join(d, f)):
        m = re.match(r"(summary|totals): (\d+)", line)
        if m:
            if best is None or int(m.group(2)) > best[0]:
                best = (int(m.group(2)), f)
            break
os.symlink(os.path.join(d, best[1]), os.path.join(d, "worker"))
EOP
    grep -E '^(events|summary|totals):' "$d/worker" >"$d/totals"
    callgrind_annotate --inclusive=no --threshold=100 --show=Ir "$d/worker" 2>/dev/null |
        grep -E '^ *[0-9,]+ ' >"$d/annot" || true
}

[ "$cache" = 1 ] && export CST_CALLGRIND_OPTS=--cache-sim=yes
run "$n"
run $((6 * n))
python3 - "$work/r$n/annot" "$work/r$((6 * n))/annot" "$n" "$top" "$scenario" <<'EOP'
import re, sys
small, big, n, top, scenario = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
def load(path):
    fns, total = {}, 0
    for line in open(path):
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(.*)$", line)
        if not m or "=>" in line or "events annotated" in line:
            continue
        v, name = int(m.group(1).replace(",", "")), m.group(2).strip()
        if "PROGRAM TOTALS" in name:
            total = v
            continue
        name = re.sub(r"\s*\[[^\]]*\]$", "", name)
        fns[name] = fns.get(name, 0) + v
    return fns, total
a, ta = load(small)
b, tb = load(big)
per = 5 * n
print("%s: %.0f instructions per request (callgrind, %d vs %d requests)"
      % (scenario, (tb - ta) / per, 6 * n, n))
rows = sorted(((b.get(k, 0) - a.get(k, 0)) / per, k) for k in set(a) | set(b))
for v, k in sorted(rows, reverse=True)[:top]:
    if v >= 1:
        print("%8.0f  %s" % (v, k))
EOP
if [ "$cache" = 1 ]; then
    python3 - "$work/r$n/totals" "$work/r$((6 * n))/totals" "$n" <<'EOP'
import sys
def load(path):
    ev, tot = [], None
    for line in open(path):
        k, _, v = line.partition(":")
        if k == "events":
            ev = v.split()
        elif k in ("summary", "totals") and tot is None:
            tot = [int(x) for x in v.split()]
    return dict(zip(ev, tot or []))
a, b, n = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
print("per request (callgrind's cache model): " + ", ".join(
    "%s %.1f" % (e, (b[e] - a.get(e, 0)) / (5 * n)) for e in
    ("I1mr", "ILmr", "D1mr", "D1mw", "DLmr") if e in b))
EOP
fi
