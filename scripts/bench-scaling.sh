#!/usr/bin/env bash
# scripts/bench-scaling.sh: do workers scale?  Instructions per cache hit
# with 1 worker and with 2, counted by valgrind's callgrind (instruction
# counts do not depend on machine noise, unlike req/s on a shared machine
# where the load generator and the servers compete for the same cores).
#
# The same number of hits (16 keep-alive connections, sequential requests
# each) of one pushed 1 KiB object is served by 1 and by 2 workers; the
# workers' instructions beyond what they inherited from the master at fork
# are summed and divided by the hits.  Equal costs per hit mean the workers
# share nothing costly on the hit path (no locks, no contended lines), so
# throughput grows with cores.  A benchmark: it prints, it never fails.
#
# Usage: scripts/bench-scaling.sh [HITS]   (default 10000; CISTERN_BIN)
set -euo pipefail

case ${1:-} in
-h | --help)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
esac
hits=${1:-10000}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/common.sh
. "$here/common.sh"
bin=${CISTERN_BIN:-$here/../_build/plain/cistern}
command -v valgrind >/dev/null || { echo "bench-scaling: valgrind not installed" >&2; exit 1; }
[ -x "$bin" ] || { echo "bench-scaling: no daemon at $bin (set CISTERN_BIN)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/cistern-scaling.XXXXXX")
trap 'rm -rf "$work"' EXIT

run() {
    local w=$1 d=$work/w$1 port master
    cst_callgrind_start "$bin" "$d" "$w" 1 127.0.0.1:9
    port=$(head -1 "$d/run/ports")
    master=$(cat "$d/run/cistern.pid")
    "$here/push.sh" --port "$port" -H m.test --bytes 1024 --max-age 3600 /k1 >/dev/null
    python3 - "$port" "$hits" <<'EOP'
import socket, sys, threading
port, hits = int(sys.argv[1]), int(sys.argv[2])
def run(n):
    s = socket.create_connection(("127.0.0.1", port))
    req = b"GET /k1 HTTP/1.1\r\nHost: m.test\r\n\r\n"
    for _ in range(n):
        s.sendall(req)
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(65536)
        body = data.split(b"\r\n\r\n", 1)[1]
        while len(body) < 1024:
            body += s.recv(65536)
    s.close()
ts = [threading.Thread(target=run, args=(hits // 16,)) for _ in range(16)]
[t.start() for t in ts]
[t.join() for t in ts]
EOP
    kill "$master"
    for _ in $(seq 60); do kill -0 "$master" 2>/dev/null || break; sleep 0.5; done
    sleep 1
    # Every child's count starts with what the master had done when it
    # forked: the smallest child total (the store's prepare child, which
    # does almost nothing after fork) is that base.
    python3 - "$d" "$w" "$master" "$hits" <<'EOP'
import os, re, sys
d, w, master, hits = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
tot = {}
for f in os.listdir(d):
    if f.startswith("cg."):
        for line in open(os.path.join(d, f)):
            m = re.match(r"(summary|totals): (\d+)", line)
            if m:
                tot[f[3:]] = int(m.group(2))
                break
kids = sorted(v for p, v in tot.items() if p != master)
base = kids[0]
workers = kids[-w:]
per = [v - base for v in workers]
print("%d worker(s): %s instructions beyond the fork base; %.0f per hit (%d hits)"
      % (w, " + ".join("%.1fM" % (x / 1e6) for x in per), sum(per) / hits, hits))
EOP
}

echo "instructions per 1 KiB cache hit (callgrind, $hits hits on 16 keep-alive connections):"
run 1
run 2
