#!/usr/bin/env bash
# scripts/quickstart.sh: build Cistern and run it in the foreground in front
# of a small demo origin.  The README's first command.
#
#   _build/plain   the build (the same one scripts/test.sh uses)
#   _demo/         the instance: records.config, remap.config, ip_allow.config,
#                  storage.config (from scripts/demo/, ports filled in), and
#                  run/ (pid, lock, ports files), log/ (error and access
#                  logs), cache/ (the store)
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: scripts/quickstart.sh [--check] [--help]

Builds Cistern (in _build/plain), writes a demo instance into _demo/, starts
the demo origin (scripts/demo/origin.py) and runs Cistern in the foreground
in front of it.  Ctrl-C stops both.  When run as root, missing Debian
packages are installed first.

Ports: Cistern listens on $CISTERN_PORT (default 8080), the origin on
$ORIGIN_PORT (default 8081).

  --check     self-test instead, both on free ports (port 0): checks what the
              quick start promises (a miss stored, then a hit; /time never
              cached; the redirect; /_stats), then SIGTERM; exits 0 when
              every answer was right and Cistern stopped cleanly
  -h, --help  this text
USAGE
}

check=0
while (($#)); do
    case $1 in
    --check) check=1 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
    shift
done

# shellcheck source=scripts/common.sh
. "$(dirname "$0")/common.sh"
cd "$CST_TOP"

if ((check)); then
    cistern_port=0
    origin_port=0
    # The remap rules need a port in their from-URLs; requests carry it in
    # the Host header (curl --connect-to) while going to the real port.
    public_port=8080
else
    cistern_port=${CISTERN_PORT:-8080}
    origin_port=${ORIGIN_PORT:-8081}
    public_port=$cistern_port
fi
[[ $cistern_port =~ ^[0-9]+$ && $origin_port =~ ^[0-9]+$ ]] ||
    cst_die "CISTERN_PORT and ORIGIN_PORT must be port numbers"
if ((public_port == 0)); then
    cst_die "CISTERN_PORT=0 only makes sense with --check"
fi

cst_ensure_packages "${CST_DEB_PACKAGES[@]}"
cst_autogen
build=$CST_TOP/_build/plain
cst_configure "$build"
cst_say "building Cistern in ${build#"$CST_TOP"/}"
cst_make "$build"
cistern=$build/cistern
[[ -x $cistern ]] || cst_die "build produced no $cistern"

# ---------------------------------------------------------------------------
# The instance directory.
demo=$CST_TOP/_demo
mkdir -p "$demo/run" "$demo/log" "$demo/cache"
rm -f "$demo/run/ports" "$demo/run/origin.port"

# subst TEMPLATE OUT: fill in the ports.
subst() {
    sed -e "s/@CISTERN_PORT@/$public_port/g" -e "s/@ORIGIN_PORT@/$origin_port/g" \
        "$1" >"$2.tmp"
    mv "$2.tmp" "$2"
}
sed -e "s/@CISTERN_PORT@/$cistern_port/g" scripts/demo/records.config \
    >"$demo/records.config"

# Started as root, Cistern's workers drop to user nobody (the default
# proxy.config.admin.user_id), who must be able to reach _demo/cache and
# _demo/log: every parent directory searchable by others.  A tree under
# /root (mode 0700) is not; the demo then keeps root for its workers rather
# than run without a cache.
reachable_by_others() {
    local d=$1
    while [[ $d != / ]]; do
        [[ $(stat -c %A "$d") == ?????????[xt] ]] || return 1
        d=$(dirname "$d")
    done
}
if ((EUID == 0)) && ! reachable_by_others "$demo"; then
    cst_say "note: user nobody cannot reach $demo (a parent directory is not searchable by others): the demo's workers run as root (proxy.config.admin.user_id #-1)"
    printf 'CONFIG proxy.config.admin.user_id STRING #-1\n' >>"$demo/records.config"
fi
cp scripts/demo/ip_allow.config scripts/demo/storage.config "$demo/"

# ---------------------------------------------------------------------------
# Processes: the origin first (its port goes into remap.config), then Cistern.
origin_pid=''
cistern_pid=''

stop_all() {
    local pid
    for pid in "$cistern_pid" "$origin_pid"; do
        if [[ -n $pid ]]; then kill -TERM "$pid" 2>/dev/null || true; fi
    done
    for pid in "$cistern_pid" "$origin_pid"; do
        if [[ -n $pid ]]; then wait "$pid" 2>/dev/null || true; fi
    done
    cistern_pid=''
    origin_pid=''
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# wait_file FILE SECONDS PID: wait for FILE to hold a number while PID lives.
# (Both writers create the file whole: written aside, then renamed.)
# Returns 1 on timeout or when PID died.
wait_file() {
    local file=$1 deadline=$((SECONDS + $2)) pid=$3
    while ((SECONDS < deadline)); do
        if [[ -s $file ]] && grep -q '[0-9]' "$file"; then
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# The first non-zero number on the first line of a ports file.
first_port() {
    local tok
    for tok in $(head -n1 "$1" | tr -c '0-9\n' ' '); do
        if ((10#$tok > 0 && 10#$tok < 65536)); then
            echo $((10#$tok))
            return 0
        fi
    done
    return 1
}

origin_args=(--port "$origin_port" --port-file "$demo/run/origin.port")
((check)) && origin_args+=(--quiet)
cst_say "starting the demo origin: python3 scripts/demo/origin.py ${origin_args[*]}"
python3 scripts/demo/origin.py "${origin_args[@]}" &
origin_pid=$!
wait_file "$demo/run/origin.port" 10 "$origin_pid" ||
    cst_die "the demo origin did not start (port $origin_port in use? set ORIGIN_PORT)"
origin_port=$(first_port "$demo/run/origin.port")
subst scripts/demo/remap.config "$demo/remap.config"

if ! ((check)); then
    host="localhost:$cistern_port"
    cat <<MSG

Cistern will run in the foreground on port $cistern_port, in front of the demo
origin on port $origin_port (instance directory: _demo/, error log:
_demo/log/error.log).  In another terminal, try:

  curl -i http://$host/                 a miss, proxied to the demo origin and stored
  curl -i http://$host/                 then a hit for 60 s (Cache-Status: cistern; hit)
  curl -i http://$host/time             never cached (no-store)
  curl -i http://old.$host/some/page    a redirect rule (301)
  curl -s http://$host/_stats           counters (JSON); /_metrics for Prometheus
  ab -k -n 10000 -c 50 http://127.0.0.1:$cistern_port/

Stop with Ctrl-C (stops Cistern and the origin).

MSG
    cst_say "$cistern -c _demo -f"
    # In the foreground: Ctrl-C reaches Cistern (SIGINT = fast stop), then the
    # EXIT trap stops the origin.
    set +e
    "$cistern" -c "$demo" -f
    rc=$?
    set -e
    cst_say "cistern exited with status $rc"
    exit "$rc"
fi

# ---------------------------------------------------------------------------
# --check: start, one request, stop.
fail() {
    printf 'quickstart --check: FAIL: %s\n' "$*" >&2
    if [[ -f $demo/log/error.log ]]; then
        printf -- '--- _demo/log/error.log (last 30 lines) ---\n' >&2
        tail -n 30 "$demo/log/error.log" >&2
    fi
    exit 1
}

cst_say "starting $cistern -c _demo -f (in the background)"
"$cistern" -c "$demo" -f &
cistern_pid=$!
wait_file "$demo/run/ports" 20 "$cistern_pid" ||
    fail "cistern wrote no _demo/run/ports within 20 s (or exited)"
port=$(first_port "$demo/run/ports") || fail "no port in _demo/run/ports: $(cat "$demo/run/ports")"
cst_say "cistern listens on port $port; origin on $origin_port"

body=$(mktemp)
hdrs=$(mktemp)
trap 'rm -f "$body" "$hdrs"; stop_all' EXIT
# get HOST PATH: one request through Cistern; sets $status, headers in $hdrs
# and the body in $body.
get() {
    status=$(curl -sS -D "$hdrs" -o "$body" -w '%{http_code}' --max-time 10 \
        --connect-to "$1:$public_port:127.0.0.1:$port" \
        "http://$1:$public_port$2") || fail "curl could not talk to cistern ($2)"
}
# cache_status: the Cache-Status field of the last response.
cache_status() {
    sed -n 's/^[Cc]ache-[Ss]tatus: *//p' "$hdrs" | tr -d '\r'
}

# The first request is a miss, proxied and stored; the second a hit.  (A
# query of its own: the store outlives the instance; the origin ignores it.)
page="/?check=$$.$RANDOM"
get localhost "$page"
cst_say "GET $page -> HTTP $status, Cache-Status: $(cache_status)"
[[ $status == 200 ]] || fail "HTTP $status from cistern: $(head -c 300 "$body")"
grep -q 'Hello from the demo origin' "$body" ||
    fail "GET $page did not return the demo origin's page: $(head -c 300 "$body")"
[[ $(cache_status) == *stored* ]] ||
    fail "GET $page was not stored: Cache-Status: $(cache_status)"
get localhost "$page"
cst_say "GET $page again -> HTTP $status, Cache-Status: $(cache_status)"
[[ $status == 200 && $(cache_status) == "cistern; hit"* ]] ||
    fail "the second GET $page was not a hit: HTTP $status, Cache-Status: $(cache_status)"

# no-store is never cached.
get localhost /time
get localhost /time
cst_say "GET /time twice -> HTTP $status, Cache-Status: $(cache_status)"
[[ $status == 200 && $(cache_status) != *hit* ]] ||
    fail "/time (no-store) was served from the cache: Cache-Status: $(cache_status)"

# The redirect rule of the demo config.
loc=$(curl -sS -o /dev/null -w '%{http_code} %{redirect_url}' --max-time 10 \
    --connect-to "old.localhost:$public_port:127.0.0.1:$port" \
    "http://old.localhost:$public_port/some/page") || fail "curl (redirect) failed"
cst_say "GET http://old.localhost:$public_port/some/page -> $loc"
[[ $loc == "301 http://localhost:$public_port/some/page" ]] ||
    fail "expected '301 http://localhost:$public_port/some/page', got '$loc'"

# The counters.
get localhost /_stats
cst_say "GET /_stats -> HTTP $status"
if [[ $status != 200 ]] || ! grep -q '"proxy.process.http.incoming_requests"' "$body"; then
    fail "/_stats: HTTP $status: $(head -c 300 "$body")"
fi

cst_say "stopping cistern (SIGTERM)"
kill -TERM "$cistern_pid"
deadline=$((SECONDS + 30))
while kill -0 "$cistern_pid" 2>/dev/null && ((SECONDS < deadline)); do
    sleep 0.1
done
if kill -0 "$cistern_pid" 2>/dev/null; then
    kill -KILL "$cistern_pid" 2>/dev/null || true
    fail "cistern did not exit within 30 s of SIGTERM"
fi
set +e
wait "$cistern_pid"
rc=$?
set -e
cistern_pid=''
((rc == 0)) || fail "cistern exited with status $rc after SIGTERM"
stop_all
printf 'quickstart --check: OK\n' >&2
