#!/usr/bin/env bash
# scripts/bench-purge.sh: what a purge costs, and what purges cost the hit
# path (issue 23).
#
# 1. A daemon with a 2 GiB store gets N objects (default 100,000) by PUSH,
#    each tagged `Surrogate-Key: tK uI` (K = I mod 10: a tag covers N/10
#    objects; uI: a tag of its own).
# 2. POST /_purge?tag=t3 (N/10 objects): the time to the answer and N.
# 3. Instructions per hit (callgrind, a daemon with one worker on the same
#    store, as scripts/profile.sh counts: runs of R and 6R hits on one
#    keep-alive connection, the difference over 5R) on an object of t0.
# 4. P purges (default 10,000) issued one by one: uI for each object of t9
#    (each removes one object); their total and mean time.
# 5. Instructions per hit again (the target: no growth), and a tag purge
#    again (t5) for its time.
# A benchmark: it prints, it never fails on a figure.
#
# Usage: scripts/bench-purge.sh [-n OBJECTS] [-p PURGES] [-r HITS]
#        (default: -n 100000 -p 10000 -r 300; CISTERN_BIN names the daemon)
set -euo pipefail

nobj=100000 npurge=10000 hits=300
while [ $# -gt 0 ]; do
    case $1 in
    -n) nobj=$2; shift 2 ;;
    -p) npurge=$2; shift 2 ;;
    -r) hits=$2; shift 2 ;;
    -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-purge: unknown argument $1" >&2; exit 2 ;;
    esac
done
here=$(cd "$(dirname "$0")" && pwd)
bin=${CISTERN_BIN:-$here/../_build/plain/cistern}
command -v valgrind >/dev/null || { echo "bench-purge: valgrind not installed" >&2; exit 1; }
[ -x "$bin" ] || { echo "bench-purge: no daemon at $bin (set CISTERN_BIN)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/cistern-bench-purge.XXXXXX")
chmod 755 "$work"
master=
cleanup() {
    if [ -n "$master" ]; then kill "$master" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

d=$work/conf
mkdir -p "$d"
cat >"$d/records.config" <<EOF
CONFIG proxy.config.http.server_ports STRING 0
CONFIG proxy.config.cistern.run_dir STRING run
CONFIG proxy.config.log.logfile_dir STRING log
CONFIG proxy.config.admin.user_id STRING #-1
CONFIG proxy.config.http.push_method_enabled INT 1
CONFIG proxy.config.log.logging_enabled INT 1
EOF
echo "$work/store 2G" >"$d/storage.config"
echo "map http://m.test/ http://127.0.0.1:9/" >"$d/remap.config"

# start [valgrind]: the daemon on $d; sets master and port
start() {
    local w=2
    rm -f "$d/run/ports"
    if [ "${1:-}" = valgrind ]; then
        w=1
        rm -f "$work"/cg.*
        sed -i '/cistern.workers/d' "$d/records.config"
        echo "CONFIG proxy.config.cistern.workers INT 1" >>"$d/records.config"
        valgrind -q --tool=callgrind --trace-children=yes \
            --callgrind-out-file="$work/cg.%p" "$bin" -c "$d" -f >"$work/out" 2>&1 &
    else
        sed -i '/cistern.workers/d' "$d/records.config"
        echo "CONFIG proxy.config.cistern.workers INT $w" >>"$d/records.config"
        "$bin" -c "$d" -f >"$work/out" 2>&1 &
    fi
    for _ in $(seq 240); do [ -s "$d/run/ports" ] && break; sleep 0.5; done
    [ -s "$d/run/ports" ] || { cat "$work/out" >&2; echo "bench-purge: no start" >&2; exit 1; }
    port=$(head -1 "$d/run/ports")
    master=$(cat "$d/run/cistern.pid")
    if [ "${1:-}" = valgrind ]; then sleep 3; fi
}

stop() {
    kill "$master"
    for _ in $(seq 120); do kill -0 "$master" 2>/dev/null || break; sleep 0.5; done
    master=
}

# client MODE ARGS...: the Python side (push, purge, hits)
client() {
    python3 - "$@" <<'EOP'
import json, socket, sys, threading, time
mode, port = sys.argv[1], int(sys.argv[2])

def conn():
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s

def exchange(s, req):
    s.sendall(req)
    data = b""
    while b"\r\n\r\n" not in data:
        d = s.recv(65536)
        if not d:
            raise SystemExit("connection closed")
        data += d
    head, body = data.split(b"\r\n\r\n", 1)
    n = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v)
    while len(body) < n:
        body += s.recv(65536)
    return int(head.split(b" ")[1]), body

if mode == "push":
    nobj = int(sys.argv[3])
    def pusher(k, step):
        s = conn()
        for i in range(k, nobj, step):
            body = b"%064d" % i
            obj = (b"HTTP/1.1 200 OK\r\nCache-Control: max-age=864000\r\n"
                   b"Surrogate-Key: t%d u%d\r\nContent-Length: 64\r\n\r\n" % (i % 10, i)) + body
            req = (b"PUSH /obj/%d HTTP/1.1\r\nHost: m.test\r\nContent-Length: %d\r\n\r\n"
                   % (i, len(obj))) + obj
            st, _ = exchange(s, req)
            if st not in (200, 201):
                raise SystemExit("PUSH %d: %d" % (i, st))
    t0 = time.monotonic()
    ts = [threading.Thread(target=pusher, args=(k, 4)) for k in range(4)]
    for t in ts: t.start()
    for t in ts: t.join()
    print("pushed %d objects in %.1f s" % (nobj, time.monotonic() - t0))
elif mode == "purge":
    s = conn()
    t0 = time.monotonic()
    st, body = exchange(s, b"POST /_purge?%s HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n"
                        % sys.argv[3].encode())
    print("POST /_purge?%s: %d %s in %.1f ms" % (sys.argv[3], st, body.decode().strip(),
                                                (time.monotonic() - t0) * 1000))
elif mode == "many":
    first, count, step = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    s = conn()
    total, worst, n = 0, 0.0, 0
    t0 = time.monotonic()
    for i in range(first, first + count * step, step):
        t1 = time.monotonic()
        st, body = exchange(s, b"POST /_purge?tag=u%d HTTP/1.1\r\nHost: localhost\r\n"
                            b"Content-Length: 0\r\n\r\n" % i)
        dt = time.monotonic() - t1
        worst = max(worst, dt)
        total += json.loads(body)["purged"]
        n += 1
    el = time.monotonic() - t0
    print("%d tag purges (one object each): %d objects, %.1f s, %.2f ms each, worst %.1f ms"
          % (n, total, el, el / n * 1000, worst * 1000))
elif mode == "hits":
    count, path = int(sys.argv[3]), sys.argv[4].encode()
    s = conn()
    for _ in range(count):
        st, _ = exchange(s, b"GET %s HTTP/1.1\r\nHost: m.test\r\n\r\n" % path)
        if st != 200:
            raise SystemExit("GET: %d" % st)
EOP
}

# per_hit: instructions per hit under callgrind (R and 6R hits)
per_hit() {
    local total=()
    for count in "$hits" $((6 * hits)); do
        start valgrind
        client hits "$port" "$count" /obj/0
        stop
        sleep 1
        total+=("$(python3 - "$work" <<'EOP'
import os, re, sys
# the worker: the one process that ran the request steps
best = 0
for f in os.listdir(sys.argv[1]):
    if not f.startswith("cg."):
        continue
    text = open(os.path.join(sys.argv[1], f)).read()
    m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
    if m and "req_steps" in text:
        best = int(m.group(1))
print(best)
EOP
)")
    done
    echo $(( (total[1] - total[0]) / (5 * hits) ))
}

start
client push "$port" "$nobj"
client purge "$port" "tag=t3"
stop
before=$(per_hit)
echo "hit path before the purges: $before instructions per hit (callgrind, $((6 * hits)) vs $hits hits)"
start
client many "$port" 9 "$npurge" 10
client purge "$port" "tag=t5"
stop
after=$(per_hit)
echo "hit path after $npurge more purges: $after instructions per hit"
