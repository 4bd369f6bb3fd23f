#!/usr/bin/env bash
# scripts/bench-tier.sh: the hit ratio of a cache tier (issue 20).
#
# A Zipf(0.9) trace (20,000 requests over 5,000 URLs by default, a fixed
# seed) is replayed by a few keep-alive clients through a child Cistern
# without a cache, whose parent.config (ATS syntax) sends every request to
# a tier of 1, 2 and 4 parent Cisterns, each with a store of --store-mb
# (16 MiB, Cistern's smallest).  Every object is --body-kb (16 KiB), so the
# trace's distinct objects (about 3,700 x 16 KiB = 57 MiB) fit only the
# whole tier of four.  For each tier size N it prints the tier's hit ratio
# (1 - origin fetches / requests, the origin's own count):
#   one node     one Cistern with a store of N x store-mb, the clients
#                talking to it directly: what the tier should match
#   consistent   the child with round_robin=consistent_hash: each URL has
#                one owning parent, so the tier holds N times the objects
#                (the target: within 2 points of one node)
#   round-robin  the child with round_robin=strict (ATS: rotate per
#                request): every parent caches every URL (worse)
# and, for the consistent tier, each parent's share of the requests.
# Every run starts cold (new stores).  The origin is t/origin.py on
# 127.0.0.1 (objects /obj/K/seed/K/bytes/N with Cache-Control: max-age=1d).
#
# The child's parent.config line is ATS's:
#   dest_domain=. parent="127.0.0.1:P1|1;127.0.0.1:P2|1" \
#       round_robin=consistent_hash go_direct=false parent_is_proxy=true
# with remap.config "map http://tier.test/ http://origin.test/" in the
# child and "map http://origin.test/ http://127.0.0.1:ORIGIN/" in each
# parent.  A daemon that refuses parent.config (a build before issue 20's
# parents) gets "n/a" and the reason in those columns; the one-node column
# needs no parent.config.
#
# A benchmark, not a test: it prints a table and never fails on numbers
# (it exits non-zero only when it cannot run at all).
#
# Usage: scripts/bench-tier.sh [--requests N] [--urls N] [--body-kb K]
#            [--store-mb M] [--parents "1 2 4"] [--clients C] [--seed S]
#        CISTERN_BIN (default _build/plain/cistern)
set -euo pipefail

requests=20000
urls=5000
body_kb=16
store_mb=16
parents="1 2 4"
clients=4
seed=1

usage() { sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; }

while (($#)); do
    case $1 in
    --requests) requests=$2; shift ;;
    --urls) urls=$2; shift ;;
    --body-kb) body_kb=$2; shift ;;
    --store-mb) store_mb=$2; shift ;;
    --parents) parents=$2; shift ;;
    --clients) clients=$2; shift ;;
    --seed) seed=$2; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
    shift
done

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
bin=${CISTERN_BIN:-$top/_build/plain/cistern}
[[ -x $bin ]] || { echo "bench-tier: no daemon at $bin (set CISTERN_BIN)" >&2; exit 1; }
((store_mb >= 16)) || { echo "bench-tier: --store-mb must be at least 16 (Cistern's smallest store)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/cistern-tier.XXXXXX")
declare -a pids=()

cleanup() {
    local p
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${pids[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

# ---------------------------------------------------------------------
# The origin and the trace

python3 -B "$top/t/origin.py" --host 127.0.0.1 --port 0 \
    --port-file "$work/origin.port" >"$work/origin.log" 2>&1 &
pids+=("$!")
for _ in $(seq 100); do [[ -s $work/origin.port ]] && break; sleep 0.1; done
[[ -s $work/origin.port ]] || { echo "bench-tier: the origin did not start" >&2; exit 1; }
oport=$(<"$work/origin.port")

# One URL index a line, Zipf(0.9) over 1..urls (rank 1 the most popular).
python3 - "$requests" "$urls" "$seed" >"$work/trace" <<'EOP'
import random, sys
n, u, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
w = [1.0 / (k ** 0.9) for k in range(1, u + 1)]
rnd = random.Random(seed)
sys.stdout.write("".join("%d\n" % k for k in rnd.choices(range(1, u + 1), weights=w, k=n)))
EOP
distinct=$(sort -u "$work/trace" | wc -l)

# ---------------------------------------------------------------------
# Daemons

# start_node NAME STORE_MB REMAP [PARENT_CONFIG]: a one-worker Cistern in
# $work/NAME (STORE_MB 0: no cache); prints its port, or fails with the
# reason on stderr.
start_node() {
    local name=$1 mb=$2 remap=$3 parent=${4:-} d p
    d=$work/$name
    rm -rf "$d"
    mkdir -p "$d"
    cat >"$d/records.config" <<EOF
CONFIG proxy.config.http.server_ports STRING 0
CONFIG proxy.config.cistern.run_dir STRING run
CONFIG proxy.config.log.logfile_dir STRING log
CONFIG proxy.config.cistern.workers INT 1
CONFIG proxy.config.admin.user_id STRING #-1
CONFIG proxy.config.log.logging_enabled INT 0
EOF
    if ((mb > 0)); then
        echo "cache ${mb}M" >"$d/storage.config"
    else
        : >"$d/storage.config"
    fi
    printf '%s\n' "$remap" >"$d/remap.config"
    printf '%s\n' "$parent" >"$d/parent.config"
    "$bin" -c "$d" -f >"$d/out" 2>&1 &
    p=$!
    pids+=("$p")
    for _ in $(seq 150); do
        [[ -s $d/run/ports ]] && break
        kill -0 "$p" 2>/dev/null || break
        sleep 0.1
    done
    if [[ ! -s $d/run/ports ]]; then
        # the first file:line message, else the last line
        grep -m1 -E '^/[^ ]*:[0-9]+: ' "$d/out" | sed 's/^[^ ]*: //' >&2 ||
            tail -1 "$d/out" >&2 || true
        return 1
    fi
    head -1 "$d/run/ports"
}

stop_all() {
    local p
    for p in "${pids[@]:1}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${pids[@]:1}"; do
        wait "$p" 2>/dev/null || true
    done
    pids=("${pids[0]}")
}

# replay PORT: the trace through 127.0.0.1:PORT with Host tier.test; prints
# "HIT_RATIO ERRORS SECONDS" (the hit ratio from the origin's count).
replay() {
    python3 - "$1" "$oport" "$work/trace" "$clients" "$((body_kb * 1024))" <<'EOP'
import json, socket, sys, threading, time
port, oport, trace, clients, size = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                     int(sys.argv[4]), int(sys.argv[5]))
keys = [int(x) for x in open(trace)]

def origin_requests():
    s = socket.create_connection(("127.0.0.1", oport))
    s.sendall(b"GET /__stats HTTP/1.1\r\nHost: o\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    return json.loads(data.split(b"\r\n\r\n", 1)[1])["requests"]

errors = [0]
lock = threading.Lock()

def client(idx):
    s, buf, bad = None, b"", 0
    for i in range(idx, len(keys), clients):
        k = keys[i]
        req = ("GET /obj/%d/seed/%d/bytes/%d/headers?Cache-Control=max-age%%3D86400 HTTP/1.1\r\n"
               "Host: tier.test\r\n\r\n" % (k, k, size)).encode()
        try:
            if s is None:
                s, buf = socket.create_connection(("127.0.0.1", port), timeout=30), b""
            s.sendall(req)
            while b"\r\n\r\n" not in buf:
                b = s.recv(65536)
                if not b:
                    raise OSError("closed")
                buf += b
            head, buf = buf.split(b"\r\n\r\n", 1)
            lines = head.split(b"\r\n")
            status = int(lines[0].split()[1])
            n = 0
            for h in lines[1:]:
                name, _, v = h.partition(b":")
                if name.strip().lower() == b"content-length":
                    n = int(v)
            while len(buf) < n:
                b = s.recv(65536)
                if not b:
                    raise OSError("closed")
                buf += b
            buf = buf[n:]
            if status != 200 or n != size:
                bad += 1
        except (OSError, ValueError, IndexError):
            bad += 1
            if s is not None:
                s.close()
            s = None
    if s is not None:
        s.close()
    with lock:
        errors[0] += bad

before = origin_requests()
t0 = time.monotonic()
ts = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
[t.start() for t in ts]
[t.join() for t in ts]
secs = time.monotonic() - t0
fetched = origin_requests() - before        # (/__ requests are not counted)
print("%.4f %d %.1f" % (1.0 - fetched / len(keys), errors[0], secs))
EOP
}

# requests PORT: the node's incoming_requests counter.
node_requests() {
    python3 - "$1" <<'EOP'
import json, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET /_stats HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
data = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    data += b
g = json.loads(data.split(b"\r\n\r\n", 1)[1])["global"]
print(int(g["proxy.process.http.incoming_requests"]) - 1)
EOP
}

pct() { awk -v r="$1" 'BEGIN { printf "%.1f%%", 100 * r }'; }

parent_remap="map http://origin.test/ http://127.0.0.1:$oport/
map http://tier.test/ http://127.0.0.1:$oport/"

# one_node N: the trace straight into one node with N stores' worth.
one_node() {
    local port ratio errs
    port=$(start_node single $(($1 * store_mb)) "$parent_remap") || { echo "n/a"; return 0; }
    read -r ratio errs _ < <(replay "$port")
    stop_all
    pct "$ratio"
    ((errs == 0)) || printf ' (%d errors)' "$errs"
    echo
}

# tier N POLICY: N parents behind a child with round_robin=POLICY; sets
# tier_out (the ratio, or n/a and why) and tier_share (each parent's
# share of the requests).
tier() {
    local n=$1 policy=$2 i port line="" cport why ratio errs
    local -a pports=()
    tier_share=""
    for ((i = 1; i <= n; i++)); do
        if ! port=$(start_node "parent$i" "$store_mb" "$parent_remap" 2>"$work/parent.err"); then
            tier_out="n/a (*)"
            notes="(*) a parent did not start: $(head -c 200 "$work/parent.err")"
            stop_all
            return 0
        fi
        pports+=("$port")
        line+="${line:+;}127.0.0.1:$port|1"
    done
    if ! cport=$(start_node child 0 "map http://tier.test/ http://origin.test/" \
        "dest_domain=. parent=\"$line\" round_robin=$policy go_direct=false parent_is_proxy=true" 2>"$work/child.err"); then
        why=$(head -c 200 "$work/child.err" | tr '\n' ' ' | sed 's/.*": //')
        tier_out="n/a (*)"
        notes="(*) the child refused parent.config: ${why% }"
        stop_all
        return 0
    fi
    read -r ratio errs _ < <(replay "$cport")
    for port in "${pports[@]}"; do
        tier_share+="${tier_share:+/}$(node_requests "$port")"
    done
    stop_all
    tier_out=$(pct "$ratio")
    ((errs == 0)) || tier_out+=" ($errs errors)"
    return 0
}

echo "tier hit ratio: $requests requests (Zipf 0.9, seed $seed) over $urls URLs, $distinct distinct,"
echo "$body_kb KiB each ($((distinct * body_kb / 1024)) MiB); $store_mb MiB store per parent; $clients clients;"
echo "the infinite-store hit ratio is $(pct "$(awk -v d="$distinct" -v n="$requests" 'BEGIN { print 1 - d / n }')")"
echo
notes=""
printf '%-8s %-10s %-12s %-16s %-24s %s\n' parents "tier store" "one node" consistent_hash "requests per parent" "round-robin (strict)"
for n in $parents; do
    single=$(one_node "$n")
    tier "$n" consistent_hash
    ch=$tier_out
    share=${tier_share:--}
    tier "$n" strict
    rr=$tier_out
    printf '%-8s %-10s %-12s %-16s %-24s %s\n' "$n" "$((n * store_mb)) MiB" "$single" "$ch" "$share" "$rr"
done
[[ -z $notes ]] || { echo; echo "$notes"; }
