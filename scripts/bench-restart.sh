#!/usr/bin/env bash
# scripts/bench-restart.sh: warm restart at scale.  Time from starting the
# daemon on a store that already holds COUNT objects (default 100,000 of
# 1 KiB) to the first cache hit served over HTTP.
#
# 1. Builds scripts/bench-restart (linked against libcache.a, with make in
#    the build directory: $CISTERN_BUILD, else the source tree) and fills
#    a fresh store with COUNT objects through the cache API, under the keys
#    the worker uses for http://bench.test/obj/<i> remapped to an origin
#    that does not exist (a miss would be a 502, never a silent hit), then
#    records a clean shutdown, as a stopped daemon leaves its store.
# 2. Starts `cistern -f` on a config pointing at that store and, from the
#    moment of the exec, GETs a stored URL in a tight loop until a response
#    carries `Cache-Status: ...; hit`.  That time is printed: with no
#    loading scan it does not grow with COUNT.  Runs twice (a clean stop in
#    between), so the second number is a restart of a store the daemon
#    itself shut down.
#
# Usage: scripts/bench-restart.sh [COUNT [BODY_BYTES [STORE_MiB]]]
# Daemon from $CISTERN_BIN, else cistern in the build directory.  A benchmark, not a
# test: it fails only when no hit comes within 30 s.
set -euo pipefail

count=${1:-100000}
body=${2:-1024}
size_mib=${3:-1024}
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CISTERN_BUILD:-$top}
bin=${CISTERN_BIN:-$build/cistern}
[[ -f $build/Makefile ]] || { echo "bench-restart: no configured build in $build (run ./configure, or set CISTERN_BUILD)" >&2; exit 1; }
[[ -x $bin ]] || { echo "bench-restart: no daemon at $bin (run make)" >&2; exit 1; }
make -s -C "$build" scripts/bench-restart >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fill=$build/scripts/bench-restart

# Two free loopback ports: the daemon's, and an origin nobody listens on.
read -r port oport < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')

conf=$tmp/conf
mkdir -p "$conf"
cat > "$conf/records.config" <<REC
CONFIG proxy.config.http.server_ports STRING $port
CONFIG proxy.config.cistern.run_dir STRING run
CONFIG proxy.config.log.logfile_dir STRING log
CONFIG proxy.config.cistern.workers INT 2
CONFIG proxy.config.admin.user_id STRING #-1
CONFIG proxy.config.url_remap.remap_required INT 1
REC
echo "map http://bench.test/ http://127.0.0.1:$oport/" > "$conf/remap.config"
echo "cache ${size_mib}M" > "$conf/storage.config"

echo "filling a ${size_mib} MiB store with $count objects of $body bytes ..."
"$fill" "$conf/cache" "$size_mib" "$count" "$body" "http://127.0.0.1:$oport/obj/"
du -sh "$conf/cache/index" | awk '{print "index on disk: " $1}'

python3 - "$bin" "$conf" "$port" "$count" <<'PY'
import http.client, os, random, signal, subprocess, sys, time

binary, conf, port, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rnd = random.Random(7)

def first_hit():
    path = "/obj/%d" % rnd.randrange(count)
    t0 = time.monotonic()
    proc = subprocess.Popen([binary, "-c", conf, "-f"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=conf, start_new_session=True)
    first_conn = status = None
    try:
        while time.monotonic() - t0 < 30:
            if proc.poll() is not None:
                sys.exit("bench-restart: the daemon exited (%s)" % proc.returncode)
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", path, headers={"Host": "bench.test"})
                r = c.getresponse()
                r.read()
                c.close()
            except OSError:
                time.sleep(0.002)
                continue
            if first_conn is None:
                first_conn = time.monotonic() - t0
            cs = r.getheader("Cache-Status") or ""
            status = (r.status, cs)
            if r.status == 200 and "hit" in cs.split(";")[-1] + cs:
                t = time.monotonic() - t0
                return t, first_conn, path, cs
            time.sleep(0.002)
        sys.exit("bench-restart: no hit within 30 s (last response: %r)" % (status,))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

for run in ("first start on the filled store", "restart after a clean stop"):
    t, conn, path, cs = first_hit()
    print("%-32s first response %6.1f ms, first hit %6.1f ms  (GET %s: %s)"
          % (run + ":", conn * 1000, t * 1000, path, cs))
PY
