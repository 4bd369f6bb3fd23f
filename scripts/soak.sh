#!/usr/bin/env bash
# scripts/soak.sh: a soak run (issue 16).  Starts Cistern (2 workers) and a
# real origin (t/origin.py), drives t/chaos.py's mixed traffic at it in soak
# mode for N minutes, SIGHUPs the master every 30 s and kill -9s a worker
# every minute, then reports what it saw.  Builds nothing.
set -euo pipefail

prog=${0##*/}

usage() {
    cat <<EOF
usage: $prog [--minutes N] [--concurrency C] [--seed S] [--keep] [--help]

Soak Cistern under mixed hostile traffic (t/chaos.py --mode soak: hits,
misses, PUSH, PURGE, pipelining, bodies, slow readers, aborts, malformed
requests, origin faults) while the master is sent SIGHUP every 30 s and a
worker is killed with SIGKILL every minute.

  --minutes N       how long to drive traffic (default 10)
  --concurrency C   concurrent chaos clients (default 8)
  --seed S          the chaos seed (default: random, printed)
  --keep            keep the work directory (kept anyway on failure)
  -h, --help        this text

The daemon is \$CISTERN_BIN, else _build/plain/cistern (build it first:
scripts/test.sh --quick).  At the end it prints: requests served, failures
by cause, worker deaths other than the ones it caused, fd count and RssAnon
per worker at the start and at the end, and whether every complete-looking
body was byte-exact.  Exit status: 0 when no invariant broke and no worker
died unbidden, 1 otherwise, 2 on a usage error.
EOF
}

die_usage() {
    printf '%s: %s\n' "$prog" "$1" >&2
    printf "Try '%s --help'.\n" "$prog" >&2
    exit 2
}

minutes=10
concurrency=8
seed=""
keep=0
while (($#)); do
    case $1 in
    --minutes | --concurrency | --seed)
        (($# >= 2)) || die_usage "$1 needs a value"
        [[ $2 =~ ^[0-9]+$ ]] || die_usage "$1 needs a whole number"
        case $1 in
        --minutes) minutes=$2 ;;
        --concurrency) concurrency=$2 ;;
        --seed) seed=$2 ;;
        esac
        shift 2
        ;;
    --keep) keep=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die_usage "unknown argument: $1" ;;
    esac
done
((minutes > 0)) || die_usage "--minutes must be at least 1"

# shellcheck source=scripts/common.sh
. "$(dirname "$0")/common.sh"

bin=${CISTERN_BIN:-$CST_TOP/_build/plain/cistern}
[[ -x $bin ]] || cst_die "no daemon at $bin (set CISTERN_BIN, or build: scripts/test.sh --quick)"
command -v python3 >/dev/null || cst_die "python3 is needed"

work=$(mktemp -d "${TMPDIR:-/tmp}/cistern-soak.XXXXXX")
conf=$work/conf
master=""
origin=""
chaos=""
failed=0

cleanup() {
    local p
    for p in "$chaos" "$origin"; do
        if [[ -n $p ]]; then kill "$p" 2>/dev/null || true; fi
    done
    if [[ -n $master ]] && kill -0 "$master" 2>/dev/null; then
        kill -TERM "$master" 2>/dev/null || true
        for _ in $(seq 100); do
            kill -0 "$master" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$master" 2>/dev/null || true
    fi
    if ((keep || failed)); then
        cst_say "work directory kept: $work"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT

# wait_file FILE SECONDS: until FILE is non-empty
wait_file() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        [[ -s $1 ]] && return 0
        sleep 0.1
    done
    return 1
}

# The master's workers: its children that hold the listening socket (the
# cache manager holds none).
workers() {
    local p
    for p in $(ss -tlnpH "sport = :$port" 2>/dev/null |
        grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
        [[ $(awk '{print $4}' "/proc/$p/stat" 2>/dev/null) == "$master" ]] &&
            printf '%s\n' "$p"
    done
    return 0
}

# proc_line PID: "pid P: N fds, RssAnon K KiB"
proc_line() {
    local fds rss
    fds=$(find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
    rss=$(awk '/^RssAnon:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0)
    printf 'pid %s: %s fds, RssAnon %s KiB' "$1" "$fds" "${rss:-0}"
}

# --- the origin -------------------------------------------------------------
mkdir -p "$conf"
python3 -B "$CST_TOP/t/origin.py" --port 0 --port-file "$work/origin.port" \
    >"$work/origin.log" 2>&1 &
origin=$!
wait_file "$work/origin.port" 10 || cst_die "the origin did not start (see $work/origin.log)"
oport=$(<"$work/origin.port")

# --- the daemon -------------------------------------------------------------
cat >"$conf/records.config" <<EOF
CONFIG proxy.config.http.server_ports STRING 0
CONFIG proxy.config.cistern.run_dir STRING run
CONFIG proxy.config.log.logfile_dir STRING log
CONFIG proxy.config.cistern.workers INT 2
CONFIG proxy.config.admin.user_id STRING #-1
CONFIG proxy.config.http.push_method_enabled INT 1
CONFIG proxy.config.http.transaction_no_activity_timeout_out INT 3
CONFIG proxy.config.http.transaction_no_activity_timeout_in INT 5
CONFIG proxy.config.http.connect_attempts_timeout INT 3
CONFIG proxy.config.http.keep_alive_no_activity_timeout_in INT 5
CONFIG proxy.config.http.keep_alive_no_activity_timeout_out INT 5
CONFIG proxy.config.cistern.request_header_timeout INT 3
CONFIG proxy.config.http.per_server.connection.max_idle INT 8
EOF
echo "cache 256M" >"$conf/storage.config"
echo "map http://c.test/ http://127.0.0.1:$oport/" >"$conf/remap.config"

cst_say "starting $bin (work directory $work)"
"$bin" -c "$conf" -f >"$work/stdout" 2>"$work/stderr" &
master=$!
wait_file "$conf/run/ports" 20 || { failed=1; cst_die "the daemon did not start (see $work/stderr)"; }
port=$(awk '{print $1; exit}' "$conf/run/ports")
for _ in $(seq 200); do
    grep -q 'ready:' "$conf/log/error.log" 2>/dev/null && break
    sleep 0.1
done

mapfile -t start_workers < <(workers)
declare -a start_lines=()
for p in "${start_workers[@]}"; do start_lines+=("$(proc_line "$p")"); done

# --- traffic, reloads, kills ---------------------------------------------------
seconds=$((minutes * 60))
cst_say "driving traffic for $minutes min at port $port (concurrency $concurrency): SIGHUP every 30 s, kill -9 a worker every 60 s"
chaos_args=(--port "$port" --host c.test --seconds "$seconds" --mode soak
    --concurrency "$concurrency" --json "$work/report.json")
[[ -n $seed ]] && chaos_args+=(--seed "$seed")
python3 -B "$CST_TOP/t/chaos.py" "${chaos_args[@]}" >"$work/chaos.out" 2>&1 &
chaos=$!

killed=()
hups=0
next_hup=30
next_kill=60
t0=$SECONDS
while kill -0 "$chaos" 2>/dev/null; do
    sleep 1
    t=$((SECONDS - t0))
    ((t >= seconds)) && continue    # the driver is finishing
    if ((t >= next_kill)); then
        next_kill=$((next_kill + 60))
        mapfile -t now < <(workers)
        if ((${#now[@]})); then
            victim=${now[RANDOM % ${#now[@]}]}
            kill -KILL "$victim" 2>/dev/null && killed+=("$victim")
            cst_say "t=${t}s: kill -9 worker $victim"
        fi
    fi
    if ((t >= next_hup)); then
        next_hup=$((next_hup + 30))
        kill -HUP "$master" && hups=$((hups + 1))
        cst_say "t=${t}s: SIGHUP"
    fi
done
chaos_rc=0
wait "$chaos" || chaos_rc=$?
chaos=""

# Let idle connections time out before the closing fd count.
sleep 8
mapfile -t end_workers < <(workers)
declare -a end_lines=()
for p in "${end_workers[@]}"; do end_lines+=("$(proc_line "$p")"); done
stats=$(curl -s --max-time 10 "http://127.0.0.1:$port/_stats" || true)

# --- the report -----------------------------------------------------------------
err=$conf/log/error.log
# Every worker death the master logged, minus the ones we caused.
unbidden=()
while IFS= read -r line; do
    pid=$(sed -E 's/.*\(pid ([0-9]+), generation.*/\1/' <<<"$line")
    mine=0
    for k in "${killed[@]}"; do [[ $k == "$pid" ]] && mine=1; done
    ((mine)) || unbidden+=("$line")
done < <(grep -E '\[(error|crit)\] .*worker [0-9]+ \(pid [0-9]+, generation [0-9]+\) (killed|exited|stopped)' "$err" || true)
sanitizer=$(grep -cE 'ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:' "$work/stderr" || true)
crit=$(grep -c '\[crit\]' "$err" || true)

echo
echo "==== soak: $minutes min, $hups SIGHUP(s), ${#killed[@]} worker(s) killed on purpose ===="
echo "chaos driver (exit $chaos_rc):"
grep -v '^    ' "$work/chaos.out" | grep -v '^VIOLATION' | sed 's/^/  /'
nviol=$(grep -c '^VIOLATION' "$work/chaos.out" || true)
if ((nviol)); then
    echo "invariant violations ($nviol; the first ones):"
    grep -A2 '^VIOLATION' "$work/chaos.out" | head -60 | sed 's/^/  /'
fi
python3 - "$stats" <<'PY'
import json, sys
try:
    g = json.loads(sys.argv[1])["global"]
except (ValueError, KeyError):
    print("daemon counters: /_stats did not answer")
    sys.exit(0)
keys = [("requests served", "proxy.process.http.incoming_requests"),
        ("2xx", "proxy.process.http.2xx_responses"),
        ("4xx", "proxy.process.http.4xx_responses"),
        ("5xx", "proxy.process.http.5xx_responses"),
        ("bad requests", "proxy.process.cistern.bad_requests"),
        ("timeouts", "proxy.process.cistern.timeouts"),
        ("origin errors", "proxy.process.cistern.origin_errors"),
        ("cache hits", "proxy.process.cache.hits"),
        ("cache misses", "proxy.process.cache.misses"),
        ("fill failures", "proxy.process.cache.fill_failures"),
        ("worker restarts", "proxy.process.cistern.worker_restarts"),
        ("reloads ok", "proxy.process.cistern.reloads_ok"),
        ("reloads failed", "proxy.process.cistern.reloads_failed")]
print("daemon counters: " + ", ".join("%s %s" % (n, g.get(k, "?"))
                                      for n, k in keys))
PY
echo "worker deaths other than the ${#killed[@]} killed: ${#unbidden[@]}"
for l in "${unbidden[@]}"; do echo "  $l"; done
echo "[crit] lines in error.log: $crit; sanitizer reports: $sanitizer"
echo "workers at the start:"
for l in "${start_lines[@]}"; do echo "  $l"; done
echo "workers at the end:"
for l in "${end_lines[@]}"; do echo "  $l"; done
bodies=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); w=r["violations"].count("wrong-body"); print("%d bodies checked, %d wrong" % (r["bodies_checked"], w))' "$work/report.json" 2>/dev/null || echo "no report")
echo "complete-looking bodies byte-exact: $bodies"

if ((chaos_rc != 0 || ${#unbidden[@]} || sanitizer || crit)); then
    failed=1
    echo "soak: FAILED"
    exit 1
fi
echo "soak: passed"
