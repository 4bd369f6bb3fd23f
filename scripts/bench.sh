#!/usr/bin/env bash
# scripts/bench.sh: Cistern against nginx, one worker each, same machine.
#
# A benchmark, not a test: it prints a table and never fails on numbers.
# Each server runs in its own temporary directory with its own config, on a
# fixed port outside the kernel's ephemeral range (checked free first), pinned
# to one CPU; the load generator (ab -k, wrk) is pinned to another.  Rounds
# are interleaved (server A, server B, server A, ...) so drift hits both.
#
# Extending it:
#   - a scenario NAME is the functions scen_NAME_desc, scen_NAME_path,
#     scen_NAME_expect (HTTP status), scen_NAME_setup (shared backends), and
#     one scen_NAME_SERVER per server that supports it (writes that server's
#     config for the scenario); add NAME to ALL_SCENARIOS.
#   - a server SERVER is srv_SERVER_prepare, srv_SERVER_start DIR PORT SCEN
#     and srv_SERVER_port; add it to ALL_SERVERS.  Ratios are against nginx.
# Function names use '_' where scenario names use '-'.
set -euo pipefail

ALL_SCENARIOS=(redirect proxy-1k)
ALL_SERVERS=(cistern nginx)
ALL_TOOLS=(ab wrk)

rounds=3
duration=10
requests=100000
concurrency=50
server_cpu=0
client_cpu=1
origin_cpu=''
port_base=${BENCH_PORT_BASE:-20080}
keep=0
scenarios=()
servers=("${ALL_SERVERS[@]}")
tools=("${ALL_TOOLS[@]}")

usage() {
    cat <<USAGE
Usage: scripts/bench.sh [options]

Benchmarks Cistern against nginx (one worker each, access logs off) with
ab -k and wrk, and prints req/s (median of the rounds), p99 latency, server
RSS (RssAnon summed over the server's processes, peak seen during the run)
and the ratio to nginx.  A benchmark, not a test: it never fails on numbers.

Cistern comes from \$CISTERN_BIN, else _build/plain/cistern (built when
missing).  nginx is installed (nginx-light) when missing and run as root.

  --scenario NAME    run this scenario (repeatable; default: all)
  --list             list the scenarios and exit
  --servers LIST     servers to compare, comma separated (default: ${ALL_SERVERS[*]})
  --tools LIST       load generators, comma separated (default: ${ALL_TOOLS[*]})
  --rounds N         interleaved rounds per tool (default $rounds)
  --duration SEC     wrk run length (default $duration)
  --requests N       ab requests per run (default $requests)
  --concurrency N    connections (default $concurrency)
  --server-cpu N     CPU for the servers (default $server_cpu)
  --client-cpu N     CPU for the load generator (default $client_cpu)
  --origin-cpu N     CPU for the shared origin (default: CPU 2 when there
                     are 3 or more, else unpinned)
  --port-base N      ports N, N+1, ... (default $port_base, env BENCH_PORT_BASE)
  --keep             keep the temporary directory (configs, error logs)
  -h, --help         this text
USAGE
}

list_scenarios() {
    local s
    for s in "${ALL_SCENARIOS[@]}"; do
        printf '%-10s %s\n' "$s" "$("scen_${s//-/_}_desc")"
    done
}

need_arg() { (($# >= 2)) || { echo "bench.sh: $1 needs an argument" >&2; exit 2; }; }
need_int() { [[ $2 =~ ^[0-9]+$ ]] || { echo "bench.sh: $1: not a number: $2" >&2; exit 2; }; }

# ---------------------------------------------------------------------------
# Scenarios.

# redirect: a redirect rule, answered without any origin.  Location lengths
# match: Cistern appends the request path to http://b.test/, nginx returns
# http://b.test$request_uri.
scen_redirect_desc() { echo "301 from a redirect rule (no origin)"; }
scen_redirect_path() { echo "/"; }
scen_redirect_expect() { echo 301; }
scen_redirect_setup() { :; }
scen_redirect_cistern() { # DIR PORT
    echo "redirect http://127.0.0.1:$2/ http://b.test/" >"$1/remap.config"
}
scen_redirect_nginx() { # DIR PORT
    cat >"$1/scenario.conf" <<CONF
server {
    listen 127.0.0.1:$2;
    location / { return 301 http://b.test\$request_uri; }
}
CONF
}

# proxy-1k: an uncached 1 KiB response through the proxy.  The origin is an
# nginx serving a static file with keep-alive and Cache-Control: no-store (so
# it stays uncached once Cistern caches).
scen_proxy_1k_desc() { echo "uncached 1 KiB through the proxy (origin: nginx static, keep-alive)"; }
scen_proxy_1k_path() { echo "/nostore/1k"; }
scen_proxy_1k_expect() { echo 200; }
scen_proxy_1k_setup() { origin_start; }
scen_proxy_1k_cistern() { # DIR PORT
    echo "map http://127.0.0.1:$2/ http://127.0.0.1:$origin_port/" >"$1/remap.config"
}
scen_proxy_1k_nginx() { # DIR PORT
    cat >"$1/scenario.conf" <<CONF
upstream origin {
    server 127.0.0.1:$origin_port;
    keepalive 32;
    keepalive_requests 100000000;
}
server {
    listen 127.0.0.1:$2;
    location / {
        proxy_pass http://origin;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_buffering on;
    }
}
CONF
}

# ---------------------------------------------------------------------------
# The shared origin: nginx serving static files, one worker.
#   /nostore/1k   1 KiB, Cache-Control: no-store
#   /cache/1k, /cache/64k   with Cache-Control: max-age=3600 (for hit-*)
origin_port=''
origin_pid=''

origin_start() {
    [[ -n $origin_pid ]] && return 0
    local dir=$work/origin
    origin_port=$((port_base + 9))
    port_check "$origin_port"
    mkdir -p "$dir/www/nostore" "$dir/www/cache"
    head -c 1024 /dev/zero | tr '\0' 'a' >"$dir/www/nostore/1k"
    cp "$dir/www/nostore/1k" "$dir/www/cache/1k"
    head -c 65536 /dev/zero | tr '\0' 'b' >"$dir/www/cache/64k"
    cat >"$dir/scenario.conf" <<CONF
server {
    listen 127.0.0.1:$origin_port;
    root $dir/www;
    location /nostore/ { add_header Cache-Control "no-store"; }
    location /cache/ { add_header Cache-Control "max-age=3600"; }
}
CONF
    nginx_conf "$dir"
    local pin=()
    [[ -n $origin_cpu ]] && pin=(taskset -c "$origin_cpu")
    "${pin[@]}" "$nginx_bin" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" \
        -g 'daemon off;' &
    origin_pid=$!
    pids_to_stop+=("$origin_pid")
    wait_http "http://127.0.0.1:$origin_port/nostore/1k" 200 "$origin_pid" ||
        die "the origin (nginx) did not start; see $dir/error.log"
}

# ---------------------------------------------------------------------------
# Servers.  srv_X_start DIR PORT SCEN starts X (pinned to server_cpu) with the
# scenario's config and sets srv_pid.

srv_cistern_prepare() {
    cistern_bin=${CISTERN_BIN:-}
    if [[ -z $cistern_bin ]]; then
        cistern_bin=$CST_TOP/_build/plain/cistern
        if [[ ! -x $cistern_bin ]]; then
            say "no $cistern_bin: building it"
            cst_ensure_packages "${CST_DEB_PACKAGES[@]}"
            cst_autogen
            cst_configure "$CST_TOP/_build/plain"
            cst_make "$CST_TOP/_build/plain"
        fi
    fi
    [[ -x $cistern_bin ]] || die "no Cistern binary at $cistern_bin"
}

srv_cistern_start() { # DIR PORT SCEN
    local dir=$1 port=$2 scen=$3
    mkdir -p "$dir/run" "$dir/log" "$dir/cache"
    # No access log is written yet; when one lands, turn it off here.
    cat >"$dir/records.config" <<CONF
CONFIG proxy.config.http.server_ports STRING $port
CONFIG proxy.config.cistern.workers INT 1
CONFIG proxy.config.cistern.run_dir STRING run
CONFIG proxy.config.log.logfile_dir STRING log
CONFIG proxy.config.http.keep_alive_no_activity_timeout_in INT 120
CONFIG proxy.config.stop.shutdown_timeout INT 2
CONF
    cp "$CST_TOP/scripts/demo/ip_allow.config" "$dir/"
    echo "cache 64M" >"$dir/storage.config"
    "scen_${scen//-/_}_cistern" "$dir" "$port"
    rm -f "$dir/run/ports"
    taskset -c "$server_cpu" "$cistern_bin" -c "$dir" -f >"$dir/stderr.log" 2>&1 &
    srv_pid=$!
    pids_to_stop+=("$srv_pid")
}

srv_nginx_prepare() { :; } # nginx_bin is found up front: the origin needs it

srv_nginx_start() { # DIR PORT SCEN
    local dir=$1 port=$2 scen=$3
    mkdir -p "$dir"
    "scen_${scen//-/_}_nginx" "$dir" "$port"
    nginx_conf "$dir"
    taskset -c "$server_cpu" "$nginx_bin" -p "$dir" -c "$dir/nginx.conf" \
        -e "$dir/error.log" -g 'daemon off;' >"$dir/stderr.log" 2>&1 &
    srv_pid=$!
    pids_to_stop+=("$srv_pid")
}

# nginx.conf around DIR/scenario.conf: one worker, no access log, keep-alive
# connections kept for the whole run (as Cistern does), temp files in DIR.
nginx_conf() {
    local dir=$1 t
    mkdir -p "$dir/tmp"
    for t in client_body proxy fastcgi uwsgi scgi; do mkdir -p "$dir/tmp/$t"; done
    cat >"$dir/nginx.conf" <<CONF
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    default_type application/octet-stream;
    keepalive_timeout 120s;
    keepalive_requests 100000000;
    client_body_temp_path $dir/tmp/client_body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    include $dir/scenario.conf;
}
CONF
}

# ---------------------------------------------------------------------------
# Helpers.

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'bench.sh: %s\n' "$*" >&2; exit 1; }

# Is anything listening on TCP port $1 (IPv4 or IPv6)?  From /proc, so no
# ss/netstat is needed.  Also warn when the port is in the ephemeral range.
port_check() {
    local port=$1 hex lo hi
    hex=$(printf '%04X' "$port")
    if awk -v h=":$hex" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == h { f = 1 } END { exit !f }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
        die "port $port is in use (try --port-base)"
    fi
    read -r lo hi </proc/sys/net/ipv4/ip_local_port_range
    if ((port >= lo && port <= hi)); then
        say "warning: port $port is in the ephemeral range $lo-$hi"
    fi
}

# wait_http URL STATUS PID: poll until URL answers STATUS (5 s), while PID lives.
wait_http() {
    local url=$1 want=$2 pid=$3 i got
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || return 1
        got=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$url" || true)
        [[ $got == "$want" ]] && return 0
        sleep 0.05
    done
    return 1
}

# stop_pid PID: SIGTERM, up to 10 s, then SIGKILL; reaps it.
stop_pid() {
    local pid=$1 i
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        say "warning: pid $pid ignored SIGTERM for 10 s: killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

# Every pid in the process tree rooted at $1.
tree_pids() {
    ps -e -o pid=,ppid= | awk -v root="$1" '
        { kids[$2] = kids[$2] " " $1 }
        END {
            n = 1; q[1] = root
            for (i = 1; i <= n; i++) {
                print q[i]
                m = split(kids[q[i]], k, " ")
                for (j = 1; j <= m; j++) q[++n] = k[j]
            }
        }'
}

# RssAnon (KiB) summed over the process tree rooted at $1.
tree_rss_anon() {
    local pid sum=0 v
    for pid in $(tree_pids "$1"); do
        v=$(awk '/^RssAnon:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
        sum=$((sum + ${v:-0}))
    done
    echo "$sum"
}

# Sample the tree's RssAnon every 0.2 s into FILE (the peak) until killed.
rss_sampler() {
    local root=$1 file=$2 peak=0 v
    while :; do
        v=$(tree_rss_anon "$root")
        ((v > peak)) && peak=$v && echo "$peak" >"$file"
        sleep 0.2
    done
}

# Milliseconds from a wrk latency figure (e.g. 812.00us, 1.23ms, 2.01s).
wrk_ms() {
    awk -v v="$1" 'BEGIN {
        if (v ~ /us$/) { sub(/us$/, "", v); printf "%.3f", v / 1000 }
        else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.3f", v }
        else if (v ~ /m$/) { sub(/m$/, "", v); printf "%.3f", v * 60000 }
        else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.3f", v * 1000 }
        else print "?" }'
}

# run_load TOOL URL EXPECT OUT: one run; writes "rps p99ms errors" to OUT.
run_load() {
    local tool=$1 url=$2 expect=$3 out=$4 log=$4.log rps p99 err
    case $tool in
    ab)
        taskset -c "$client_cpu" ab -q -k -n "$requests" -c "$concurrency" "$url" \
            >"$log" 2>&1 || true
        rps=$(awk '/^Requests per second:/ { print $4 }' "$log")
        p99=$(awk '$1 == "99%" { print $2 }' "$log")
        err=$(awk '/^Failed requests:/ { f += $3 } /^Non-2xx responses:/ { n += $3 }
                   END { print f + 0, n + 0 }' "$log")
        # Non-2xx is expected for redirect scenarios.
        read -r f n <<<"$err"
        if [[ $expect == 2* ]]; then err=$((f + n)); else err=$((f + (requests - n))); fi
        ;;
    wrk)
        taskset -c "$client_cpu" wrk -t1 -c "$concurrency" -d "${duration}s" --latency \
            "$url" >"$log" 2>&1 || true
        rps=$(awk '/^Requests\/sec:/ { print $2 }' "$log")
        p99=$(awk '$1 == "99%" { print $2 }' "$log")
        [[ -n $p99 ]] && p99=$(wrk_ms "$p99")
        err=$(awk '/Socket errors:/ { gsub(",", ""); s = $4 + $6 + $8 + $10 }
                   /Non-2xx or 3xx responses:/ { n = $5 }
                   END { print s + n }' "$log")
        ;;
    esac
    [[ -n $rps ]] || { rps=0; err=failed; }
    echo "$rps ${p99:-?} $err" >"$out"
}

# Median of the numbers on stdin.
median() {
    sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "-"; exit }
        if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# ---------------------------------------------------------------------------
# Arguments.

while (($#)); do
    case $1 in
    --scenario) need_arg "$@"; scenarios+=("$2"); shift ;;
    --list) list_scenarios; exit 0 ;;
    --servers) need_arg "$@"; IFS=, read -r -a servers <<<"$2"; shift ;;
    --tools) need_arg "$@"; IFS=, read -r -a tools <<<"$2"; shift ;;
    --rounds) need_arg "$@"; need_int "$1" "$2"; rounds=$2; shift ;;
    --duration) need_arg "$@"; need_int "$1" "$2"; duration=$2; shift ;;
    --requests) need_arg "$@"; need_int "$1" "$2"; requests=$2; shift ;;
    --concurrency) need_arg "$@"; need_int "$1" "$2"; concurrency=$2; shift ;;
    --server-cpu) need_arg "$@"; need_int "$1" "$2"; server_cpu=$2; shift ;;
    --client-cpu) need_arg "$@"; need_int "$1" "$2"; client_cpu=$2; shift ;;
    --origin-cpu) need_arg "$@"; need_int "$1" "$2"; origin_cpu=$2; shift ;;
    --port-base) need_arg "$@"; need_int "$1" "$2"; port_base=$2; shift ;;
    --keep) keep=1 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
    shift
done
((${#scenarios[@]})) || scenarios=("${ALL_SCENARIOS[@]}")
for s in "${scenarios[@]}"; do
    declare -F "scen_${s//-/_}_desc" >/dev/null ||
        { echo "bench.sh: unknown scenario '$s' (see --list)" >&2; exit 2; }
done
for s in "${servers[@]}"; do
    declare -F "srv_${s}_start" >/dev/null ||
        { echo "bench.sh: unknown server '$s' (known: ${ALL_SERVERS[*]})" >&2; exit 2; }
done
for s in "${tools[@]}"; do
    [[ " ${ALL_TOOLS[*]} " == *" $s "* ]] ||
        { echo "bench.sh: unknown tool '$s' (known: ${ALL_TOOLS[*]})" >&2; exit 2; }
done
((rounds >= 1 && concurrency >= 1 && duration >= 1 && requests >= 1)) ||
    { echo "bench.sh: counts must be at least 1" >&2; exit 2; }

# shellcheck source=scripts/common.sh
. "$(dirname "$0")/common.sh"

# ---------------------------------------------------------------------------
# Setup.

ncpu=$(nproc)
if ((ncpu < 2)); then
    say "warning: $ncpu CPU: server and load generator share it"
    server_cpu=0 client_cpu=0
fi
((server_cpu < ncpu && client_cpu < ncpu)) || die "only CPUs 0-$((ncpu - 1)) exist"
if [[ -z $origin_cpu ]] && ((ncpu >= 3)); then origin_cpu=2; fi

cst_ensure_packages apache2-utils wrk curl procps
nginx_bin=$(command -v nginx || true)
[[ -z $nginx_bin && -x /usr/sbin/nginx ]] && nginx_bin=/usr/sbin/nginx
if [[ -z $nginx_bin ]]; then
    ((EUID == 0)) || die "nginx is not installed (apt-get install nginx-light)"
    say "installing nginx-light"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends nginx-light ||
        apt-get install -y --no-install-recommends nginx
    nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
    # The package starts a system nginx on port 80; it does not matter here.
fi

for s in "${servers[@]}"; do "srv_${s}_prepare"; done

work=$(mktemp -d /tmp/cistern-bench.XXXXXX)
# Unprivileged nginx workers (nobody) must read the origin's files.
chmod 755 "$work"
pids_to_stop=()
cleanup() {
    local pid
    for pid in "${pids_to_stop[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids_to_stop[@]}"; do stop_pid "$pid"; done
    if ((keep)); then say "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "servers on CPU $server_cpu, load on CPU $client_cpu, origin on CPU ${origin_cpu:-any}"
say "rounds $rounds, ab -k -n $requests -c $concurrency, wrk -t1 -c $concurrency -d ${duration}s"

declare -A res_rps res_p99 res_rss res_err note
rows=()

for scen in "${scenarios[@]}"; do
    fn=${scen//-/_}
    say "scenario $scen: $("scen_${fn}_desc")"
    "scen_${fn}_setup"
    path=$("scen_${fn}_path")
    expect=$("scen_${fn}_expect")
    declare -A spid=() sport=()
    live=()
    i=0
    for srv in "${servers[@]}"; do
        port=$((port_base + i))
        i=$((i + 1))
        if ! declare -F "scen_${fn}_${srv}" >/dev/null; then
            note[$scen|$srv]="scenario not supported"
            continue
        fi
        port_check "$port"
        dir=$work/$scen/$srv
        mkdir -p "$dir"
        "srv_${srv}_start" "$dir" "$port" "$scen"
        url="http://127.0.0.1:$port$path"
        if ! wait_http "$url" "$expect" "$srv_pid"; then
            got=$(curl -s -o "$dir/probe.body" -w '%{http_code}' --max-time 2 "$url" || true)
            note[$scen|$srv]="n/a: HTTP ${got:-none}, expected $expect: $(head -c 60 "$dir/probe.body" 2>/dev/null | tr -s '\r\n' '  ')"
            say "$srv: ${note[$scen|$srv]}"
            stop_pid "$srv_pid"
            continue
        fi
        spid[$srv]=$srv_pid
        sport[$srv]=$port
        live+=("$srv")
    done

    for ((r = 1; r <= rounds; r++)); do
        order=("${live[@]}")
        if ((r % 2 == 0)); then # alternate who goes first
            order=()
            for ((j = ${#live[@]} - 1; j >= 0; j--)); do order+=("${live[j]}"); done
        fi
        for tool in "${tools[@]}"; do
            for srv in "${order[@]}"; do
                key="$scen|$tool|$srv"
                out=$work/$scen/$srv/$tool.$r
                rss_sampler "${spid[$srv]}" "$out.rss" &
                sampler=$!
                run_load "$tool" "http://127.0.0.1:${sport[$srv]}$path" "$expect" "$out"
                kill "$sampler" 2>/dev/null || true
                wait "$sampler" 2>/dev/null || true
                read -r rps p99 err <"$out"
                rss=$(cat "$out.rss" 2>/dev/null || echo 0)
                res_rps[$key]+="$rps "
                res_p99[$key]+="$p99 "
                ((rss > ${res_rss[$key]:-0})) && res_rss[$key]=$rss
                if [[ $err != 0 ]]; then res_err[$key]="${res_err[$key]:-}$err "; fi
                say "round $r $tool $srv: $rps req/s, p99 $p99 ms, RssAnon $rss KiB, errors $err"
            done
        done
    done
    for srv in "${live[@]}"; do stop_pid "${spid[$srv]}"; done
    rows+=("$scen")
    unset spid sport
done

# ---------------------------------------------------------------------------
# The table.
printf '\n%-10s %-4s %-8s %12s %10s %10s %8s  %s\n' \
    scenario tool server 'req/s' 'p99 ms' 'RSS KiB' 'vs nginx' notes
for scen in "${rows[@]}"; do
    for tool in "${tools[@]}"; do
        base=''
        if [[ -n ${res_rps[$scen|$tool|nginx]:-} ]]; then
            base=$(tr ' ' '\n' <<<"${res_rps[$scen|$tool|nginx]}" | grep . | median)
        fi
        for srv in "${servers[@]}"; do
            key="$scen|$tool|$srv"
            if [[ -z ${res_rps[$key]:-} ]]; then
                printf '%-10s %-4s %-8s %12s %10s %10s %8s  %s\n' "$scen" "$tool" "$srv" \
                    - - - - "${note[$scen|$srv]:-}"
                continue
            fi
            rps=$(tr ' ' '\n' <<<"${res_rps[$key]}" | grep . | median)
            p99=$(tr ' ' '\n' <<<"${res_p99[$key]}" | grep -E '^[0-9.]+$' | median || echo -)
            ratio=-
            if [[ -n $base && $srv != nginx ]]; then
                ratio=$(awk -v a="$rps" -v b="$base" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
            fi
            notes=''
            [[ -n ${res_err[$key]:-} ]] && notes="errors per run: ${res_err[$key]}"
            printf '%-10s %-4s %-8s %12.0f %10s %10s %8s  %s\n' "$scen" "$tool" "$srv" \
                "$rps" "$p99" "${res_rss[$key]:-0}" "$ratio" "$notes"
        done
    done
done
printf '\n(req/s and p99: medians of %d rounds; RSS: peak RssAnon summed over the server'"'"'s processes)\n' "$rounds"
