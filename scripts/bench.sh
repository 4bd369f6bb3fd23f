#!/usr/bin/env bash
# scripts/bench.sh: Cistern against its peers and against the limit, one
# worker each, same machine.
#
# A benchmark, not a test: it prints tables and never fails on numbers.
#
# Method (issue 12).  Every server runs in its own temporary directory with
# its own config, on a fixed port outside the kernel's ephemeral range
# (checked free first), pinned to one CPU (--server-cpu), with one worker or
# thread pool, a cache in memory or on disk, and access logs off; the load
# generator (ab -k, wrk) is pinned to another CPU.  The servers are:
#   limit    scripts/limit-server.c: a trivial single-threaded epoll server
#            answering every request with the same bytes from memory, the
#            practical limit of one core on loopback.  Every figure is printed
#            as a fraction of its req/s.
#   cistern  this tree's daemon (storage.config "cache 256M").
#   nginx    proxy_cache (on disk, i.e. the page cache), keep-alive upstream.
#   varnish  varnishd -s malloc,256m, one thread pool.
#   squid    squid -N, cache_mem 256 MB, no disk cache.
#   ats      Apache Traffic Server: traffic_server with a private runroot,
#            one ET_NET thread, a 256 MB cache file and RAM cache.
# Two scenarios are the seeds' own (issue 19), typed as their authors did:
#   push-64k   the PUSH benchmark of ATS PR 7382: records.config with
#            remap_required 0, required_headers 0, push_method_enabled 1 and
#            two ports; remap.config "map http://localhost:GETPORT
#            http://fakehost"; the object loaded by t/seeds/push_gen.c piped
#            into "nc -N localhost PUSHPORT" (201 expected); then "h2load
#            --h1 -t 1 -c 40 -D SEC http://localhost:GETPORT/fake".  No
#            origin: fakehost does not resolve, so a 200 is a hit.
#   forward-1k the forward-proxy benchmark of the ATS wiki: each server a
#            caching forward proxy (remap_required 0, no rules; Squid a
#            plain forward proxy), "ab -X 127.0.0.1:PORT -k -c 10 -n N
#            http://127.0.0.1:ORIGIN/cache/1k"; the origin's requests per
#            run are printed beside the req/s (a proxy that relays
#            everything is fast here and slow across the internet).
# The origin is one nginx serving static files.  For a cache-hit scenario the
# object is warmed by one GET and a second GET must be a hit (the origin's
# log of /cache/ must not grow; Cistern must also say "Cache-Status: cistern;
# hit"), else the server shows "n/a" with the reason, as does a server that
# fails to start or is not installed.  Each server then gets a 1 s warm-up
# load (Varnish creates its threads then).  Rounds are interleaved (servers
# in one order, then reversed) so drift hits everyone; each figure is the
# median of the rounds.  Memory per idle connection is measured on a fresh
# server each round (a server that served a load before would reuse memory
# it freed then).  The access log's cost (hit-1k-log) is measured against a
# second Cistern with the log off, interleaved in the same rounds.
#
# Noise: on a virtual machine shared with other work, each figure moves by
# tens of percent from run to run (the load average at the start and the
# end is printed).  Prefer more, shorter rounds (--rounds 5 --duration 4)
# and --nice -10 when the machine is yours.
#
# Extending it:
#   - a scenario NAME is the functions scen_NAME_desc, scen_NAME_path,
#     scen_NAME_expect (HTTP status), scen_NAME_kind (proxy: the servers
#     proxy/cache the origin; redirect: a redirect rule; push: push-64k's
#     two ports, the object PUSHed before the GETs; forward: a forward
#     proxy, the load sent to the origin's URL through it), scen_NAME_hit
#     (1: the warm-up must give a cache hit), scen_NAME_size (the limit
#     server's body bytes), scen_NAME_tools ("TOOL:CONNECTIONS ..."; tools:
#     ab, wrk, h2load (--h1), h2 (h2load in HTTP/2, 10 streams per
#     connection), idle), scen_NAME_setup (shared backends) and
#     optionally scen_NAME_servers (the servers it applies to; default all),
#     scen_NAME_scheme (https: the servers listen with TLS, with the
#     self-signed certificate tls_cert makes; default http) and
#     scen_NAME_host (the host in the URL; default 127.0.0.1); add NAME to
#     ALL_SCENARIOS (and DEFAULT_SCENARIOS to run it by default).
#   - a scenario without the limit server (TLS: the limit speaks plain HTTP)
#     shows req/s instead of fractions of the limit's.
#   - a server SERVER is srv_SERVER_prepare (sets unavailable[SERVER] to a
#     reason when it cannot run) and srv_SERVER_start DIR PORT SCEN (starts
#     it pinned to server_cpu with the scenario's config, sets srv_pid); add
#     it to ALL_SERVERS.
# Function names use '_' where scenario names use '-'.
set -euo pipefail

ALL_SCENARIOS=(hit-1k hit-64k hit-1m hit-64m proxy-1k conn-1 hit-1k-log idle-conn redirect https-hit-1k push-64k forward-1k h2-hit-1k h2-hit-64k)
DEFAULT_SCENARIOS=(hit-1k hit-64k proxy-1k conn-1 hit-1k-log idle-conn push-64k forward-1k)
ALL_SERVERS=(limit cistern nginx varnish squid ats)
ALL_TOOLS=(ab wrk h2load h2 idle)

rounds=3
duration=10
requests=100000
concurrency=''
idle_conns=1000
warmup=1
server_cpu=0
client_cpu=1
origin_cpu=''
port_base=${BENCH_PORT_BASE:-20080}
nice_level=0
keep=0
quick=0
scenarios=()
servers=("${ALL_SERVERS[@]}")
tools=("${ALL_TOOLS[@]}")

usage() {
    cat <<USAGE
Usage: scripts/bench.sh [options]

Benchmarks Cistern against nginx (proxy_cache), Varnish, Squid and Apache
Traffic Server, one worker each, access logs off, and against a trivial
epoll server answering from memory (the limit).  Prints, per scenario and
load generator, req/s as a fraction of the limit's (medians of interleaved
rounds) and the Cistern/nginx ratio; then p50/p99 latency, peak RSS, and
memory per idle keep-alive connection.  It never fails on numbers.
Two scenarios are the seeds' own, as their authors ran them: push-64k
(ATS PR 7382: an object PUSHed with nc, then h2load --h1 -c40; Cistern and
ATS) and forward-1k (the ATS wiki's forward proxy: ab -X; Cistern, ATS and
Squid, with the origin's request count per run).

Cistern comes from \$CISTERN_BIN, else _build/plain/cistern, else ./cistern
(built in _build/plain when none exists).  Missing peers are installed with
apt-get when run as root; a peer that cannot be installed or started shows
"n/a" and the reason.

  --scenario NAME    run this scenario (repeatable; default: ${DEFAULT_SCENARIOS[*]})
  --list             list the scenarios and exit
  --servers LIST     servers, comma separated (default: ${ALL_SERVERS[*]};
                     the limit server is always added)
  --tools LIST       load generators, comma separated (default: ${ALL_TOOLS[*]})
  --rounds N         interleaved rounds (default $rounds)
  --quick            a smoke run: 1 round, wrk 2 s, ab 20000 requests,
                     200 idle connections (options after it override it)
  --duration SEC     wrk and h2load run length (default $duration)
  --requests N       ab requests per run (default $requests)
  --concurrency N    connections for ab, wrk and h2load (default: each scenario's,
                     e.g. ab 100 and wrk 50; conn-1 stays at 1)
  --idle-conns N     idle keep-alive connections for idle-conn (default $idle_conns)
  --server-cpu N     CPU for the servers (default $server_cpu)
  --client-cpu N     CPU for the load generator (default $client_cpu)
  --origin-cpu N     CPU for the shared origin (default: CPU 2 when there
                     are 3 or more, else unpinned)
  --port-base N      ports N to N+19 (default $port_base, env BENCH_PORT_BASE)
  --nice N           run the servers and the load generator at this nice
                     level (root; e.g. -10 on a machine shared with other
                     work: fewer of their time slices land in a run; the
                     load average at the start and the end is printed)
  --keep             keep the temporary directory (configs, logs)
  -h, --help         this text
USAGE
}

list_scenarios() {
    local s d
    for s in "${ALL_SCENARIOS[@]}"; do
        d=''
        [[ " ${DEFAULT_SCENARIOS[*]} " == *" $s "* ]] || d=' (not run by default)'
        printf '%-12s %s [%s]%s\n' "$s" "$("scen_${s//-/_}_desc")" \
            "$("scen_${s//-/_}_tools")" "$d"
    done
}

need_arg() { (($# >= 2)) || { echo "bench.sh: $1 needs an argument" >&2; exit 2; }; }
need_int() { [[ $2 =~ ^[0-9]+$ ]] || { echo "bench.sh: $1: not a number: $2" >&2; exit 2; }; }

# ---------------------------------------------------------------------------
# Scenarios.

# hit-1k, hit-64k: keep-alive cache hits of one object.
scen_hit_1k_desc() { echo "keep-alive cache hits of a 1 KiB object"; }
scen_hit_1k_path() { echo "/cache/1k"; }
scen_hit_1k_expect() { echo 200; }
scen_hit_1k_kind() { echo proxy; }
scen_hit_1k_hit() { echo 1; }
scen_hit_1k_size() { echo 1024; }
scen_hit_1k_tools() { echo "ab:100 wrk:50"; }
scen_hit_1k_setup() { origin_start; }

scen_hit_64k_desc() { echo "keep-alive cache hits of a 64 KiB object"; }
scen_hit_64k_path() { echo "/cache/64k"; }
scen_hit_64k_expect() { echo 200; }
scen_hit_64k_kind() { echo proxy; }
scen_hit_64k_hit() { echo 1; }
scen_hit_64k_size() { echo 65536; }
scen_hit_64k_tools() { echo "ab:100 wrk:50"; }
scen_hit_64k_setup() { origin_start; }

# hit-1m, hit-64m (issue 21): keep-alive hits of large objects, against
# nginx (proxy_cache on disk = the page cache, served with sendfile).
# Cistern writes them from its mapping with writev (no copy in user space;
# 64 MiB spans extents on the 1G store these scenarios give it: a 256M
# store's largest object is a quarter of it).  Not run by default.
scen_hit_1m_desc() { echo "keep-alive cache hits of a 1 MiB object"; }
scen_hit_1m_path() { echo "/cache/1m"; }
scen_hit_1m_expect() { echo 200; }
scen_hit_1m_kind() { echo proxy; }
scen_hit_1m_hit() { echo 1; }
scen_hit_1m_size() { echo 1048576; }
scen_hit_1m_tools() { echo "ab:20 wrk:20"; }
scen_hit_1m_setup() { origin_start; }
scen_hit_1m_servers() { echo "limit cistern nginx"; }
scen_hit_64m_desc() { echo "keep-alive cache hits of a 64 MiB object"; }
scen_hit_64m_path() { echo "/cache/64m"; }
scen_hit_64m_expect() { echo 200; }
scen_hit_64m_kind() { echo proxy; }
scen_hit_64m_hit() { echo 1; }
scen_hit_64m_size() { echo 67108864; }
scen_hit_64m_tools() { echo "ab:4 wrk:4"; }
scen_hit_64m_setup() { origin_start; }
scen_hit_64m_servers() { echo "limit cistern nginx"; }
scen_hit_64m_store() { echo 1G; }

# proxy-1k: an uncached 1 KiB response through the proxy (Cache-Control:
# no-store from the origin, so every request goes to it).
scen_proxy_1k_desc() { echo "uncached 1 KiB through the proxy (origin: nginx static, keep-alive)"; }
scen_proxy_1k_path() { echo "/nostore/1k"; }
scen_proxy_1k_expect() { echo 200; }
scen_proxy_1k_kind() { echo proxy; }
scen_proxy_1k_hit() { echo 0; }
scen_proxy_1k_size() { echo 1024; }
scen_proxy_1k_tools() { echo "ab:100 wrk:50"; }
scen_proxy_1k_setup() { origin_start; }

# conn-1: one connection, one request at a time: latency (the ATS thread's
# test).  Its figure of merit is p50 against the limit's.
scen_conn_1_desc() { echo "one keep-alive connection, 1 KiB hits (wrk -c1 -t1): p50 latency"; }
scen_conn_1_path() { echo "/cache/1k"; }
scen_conn_1_expect() { echo 200; }
scen_conn_1_kind() { echo proxy; }
scen_conn_1_hit() { echo 1; }
scen_conn_1_size() { echo 1024; }
scen_conn_1_tools() { echo "wrk:1"; }
scen_conn_1_setup() { origin_start; }

# hit-1k-log: hit-1k with Cistern's access log on (its default), to show the
# cost of logging.  A second Cistern with the log off (cistern-nolog, not a
# column of its own) runs interleaved with it, so the cost is measured in
# the same rounds rather than against hit-1k's, minutes apart.
scen_hit_1k_log_desc() { echo "hit-1k with Cistern's access log on"; }
scen_hit_1k_log_path() { echo "/cache/1k"; }
scen_hit_1k_log_expect() { echo 200; }
scen_hit_1k_log_kind() { echo proxy; }
scen_hit_1k_log_hit() { echo 1; }
scen_hit_1k_log_size() { echo 1024; }
scen_hit_1k_log_tools() { echo "ab:100 wrk:50"; }
scen_hit_1k_log_servers() { echo "limit cistern cistern-nolog"; }
scen_hit_1k_log_setup() { origin_start; }

# idle-conn: memory per idle keep-alive connection: RssAnon of the server's
# processes before and after opening N connections that each made one
# request (a 1 KiB hit) and stay open; (after - before) / N bytes.
scen_idle_conn_desc() { echo "memory per idle keep-alive connection (RssAnon delta / N)"; }
scen_idle_conn_path() { echo "/cache/1k"; }
scen_idle_conn_expect() { echo 200; }
scen_idle_conn_kind() { echo proxy; }
scen_idle_conn_hit() { echo 1; }
scen_idle_conn_size() { echo 1024; }
scen_idle_conn_tools() { echo "idle:$idle_conns"; }
scen_idle_conn_setup() { origin_start; }

# redirect: a redirect rule, answered without any origin.  Location lengths
# match: Cistern appends the request path to http://b.test/, nginx returns
# http://b.test$request_uri.
scen_redirect_desc() { echo "301 from a redirect rule (no origin)"; }
scen_redirect_path() { echo "/"; }
scen_redirect_expect() { echo 301; }
scen_redirect_kind() { echo redirect; }
scen_redirect_hit() { echo 0; }
scen_redirect_size() { echo 0; }
scen_redirect_tools() { echo "ab:50 wrk:50"; }
scen_redirect_servers() { echo "limit cistern nginx"; }
scen_redirect_setup() { :; }

# https-hit-1k: hit-1k over TLS (keep-alive, so few handshakes): Cistern's
# ":ssl" port against nginx's "listen ssl", both with a self-signed P-256
# certificate, TLS 1.2 and 1.3, session tickets on.  The limit server speaks
# plain HTTP, so the cells are req/s and the figure is Cistern/nginx.
scen_https_hit_1k_desc() { echo "keep-alive HTTPS cache hits of a 1 KiB object (TLS; no limit)"; }
scen_https_hit_1k_path() { echo "/cache/1k"; }
scen_https_hit_1k_expect() { echo 200; }
scen_https_hit_1k_kind() { echo proxy; }
scen_https_hit_1k_hit() { echo 1; }
scen_https_hit_1k_size() { echo 1024; }
scen_https_hit_1k_tools() { echo "ab:100 wrk:50"; }
scen_https_hit_1k_servers() { echo "cistern nginx"; }
scen_https_hit_1k_scheme() { echo https; }
scen_https_hit_1k_setup() { origin_start; tls_cert; }

# h2-hit-1k, h2-hit-64k (issue 24): cache hits over HTTP/2 on TLS, "h2load
# -c40 -m10" (ALPN h2): Cistern's ":ssl" port (h2 by default), nginx's
# "listen ssl http2", ATS's ":ssl" port (h2 by default); one worker each.
scen_h2_hit_1k_desc() { echo "HTTP/2 over TLS, cache hits of 1 KiB (h2load -c40 -m10; no limit)"; }
scen_h2_hit_1k_path() { echo "/cache/1k"; }
scen_h2_hit_1k_expect() { echo 200; }
scen_h2_hit_1k_kind() { echo proxy; }
scen_h2_hit_1k_hit() { echo 1; }
scen_h2_hit_1k_size() { echo 1024; }
scen_h2_hit_1k_tools() { echo "h2:40"; }
scen_h2_hit_1k_servers() { echo "cistern nginx ats"; }
scen_h2_hit_1k_scheme() { echo https; }
scen_h2_hit_1k_setup() { origin_start; tls_cert; }
scen_h2_hit_64k_desc() { echo "HTTP/2 over TLS, cache hits of 64 KiB (h2load -c40 -m10; no limit)"; }
scen_h2_hit_64k_path() { echo "/cache/64k"; }
scen_h2_hit_64k_expect() { echo 200; }
scen_h2_hit_64k_kind() { echo proxy; }
scen_h2_hit_64k_hit() { echo 1; }
scen_h2_hit_64k_size() { echo 65536; }
scen_h2_hit_64k_tools() { echo "h2:40"; }
scen_h2_hit_64k_servers() { echo "cistern nginx ats"; }
scen_h2_hit_64k_scheme() { echo https; }
scen_h2_hit_64k_setup() { origin_start; tls_cert; }

# push-64k: the PUSH benchmark of ATS PR 7382 (see the head comment).  The
# limit server answers the GETs with 64 KiB as for hit-64k.
scen_push_64k_desc() { echo "ATS PR 7382: 64 KiB PUSHed (push_gen | nc -N), GET on the other port (h2load --h1)"; }
scen_push_64k_path() { echo "/fake"; }
scen_push_64k_expect() { echo 200; }
scen_push_64k_kind() { echo push; }
scen_push_64k_hit() { echo 1; }
scen_push_64k_size() { echo 65536; }
scen_push_64k_tools() { echo "h2load:40"; }
scen_push_64k_host() { echo localhost; }
scen_push_64k_servers() { echo "limit cistern ats"; }
scen_push_64k_setup() {
    push_gen_build
    # A 200 for fakehost is a hit only while fakehost does not resolve.
    if getent hosts fakehost >/dev/null 2>&1; then
        say "warning: fakehost resolves here: a 200 on the GET port need not be a hit"
    fi
}

# forward-1k: the forward-proxy benchmark of the ATS wiki (see the head
# comment).  Not a hit scenario: a proxy that relays everything still gets
# its req/s, and the origin's count shows what it did.
scen_forward_1k_desc() { echo "ATS wiki: forward proxy, ab -X -k -c10 to the origin's cacheable 1 KiB"; }
scen_forward_1k_path() { echo "/cache/1k"; }
scen_forward_1k_expect() { echo 200; }
scen_forward_1k_kind() { echo forward; }
scen_forward_1k_hit() { echo 0; }
scen_forward_1k_size() { echo 1024; }
scen_forward_1k_tools() { echo "ab:10"; }
scen_forward_1k_servers() { echo "limit cistern squid ats"; }
scen_forward_1k_setup() { origin_start; }

# scen_scheme SCEN: http, or the scenario's scen_NAME_scheme.
scen_scheme() {
    if declare -F "scen_${1//-/_}_scheme" >/dev/null; then "scen_${1//-/_}_scheme"; else echo http; fi
}

# scen_host SCEN: 127.0.0.1, or the scenario's scen_NAME_host.
scen_host() {
    if declare -F "scen_${1//-/_}_host" >/dev/null; then "scen_${1//-/_}_host"; else echo 127.0.0.1; fi
}

# scen_kind SCEN: the scenario's kind.
scen_kind() { "scen_${1//-/_}_kind"; }

# push_port PORT: a push-64k server's PUSH port, beside its GET port PORT.
push_port() { echo $(($1 + 10)); }

# push_gen_build: compile the PUSH generator (t/seeds/push_gen.c), once.
push_gen_build() {
    [[ -x $work/push_gen ]] && return 0
    gcc -O2 -o "$work/push_gen" "$CST_TOP/t/seeds/push_gen.c" 2>"$work/push_gen.log" ||
        die "gcc t/seeds/push_gen.c failed; see $work/push_gen.log"
}

# push_object DIR PUSHPORT PID: the generator's output through "nc -N
# localhost PUSHPORT" once the port accepts (while PID lives); prints the
# status the server answered (nothing when none).
push_object() {
    local dir=$1 pport=$2 pid=$3 i
    for ((i = 0; i < 600; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        (: <"/dev/tcp/127.0.0.1/$pport") 2>/dev/null && break
        sleep 0.05
    done
    "$work/push_gen" | timeout 20 nc -N localhost "$pport" >"$dir/push.out" 2>"$dir/push.err" || true
    awk 'NR == 1 { print $2 }' "$dir/push.out"
}

# tls_cert: a self-signed P-256 certificate for localhost, valid 2 days,
# in $work/tls/cert.pem and key.pem (once per run).
tls_cert() {
    [[ -s $work/tls/cert.pem ]] && return 0
    mkdir -p "$work/tls"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -days 2 -subj /CN=localhost -keyout "$work/tls/key.pem" \
        -out "$work/tls/cert.pem" >"$work/tls/openssl.log" 2>&1 ||
        die "openssl req failed; see $work/tls/openssl.log"
    chmod 644 "$work/tls/cert.pem" "$work/tls/key.pem"
}

# ---------------------------------------------------------------------------
# The shared origin: nginx serving static files, one worker.
#   /nostore/1k   1 KiB, Cache-Control: no-store
#   /cache/1k, /cache/64k   Cache-Control: max-age=3600; requests for
#                 /cache/ are logged (origin/cache.log), which is how a hit
#                 is told from a fetch for every server alike.
origin_port=''
origin_pid=''

origin_start() {
    [[ -n $origin_pid ]] && return 0
    local dir=$work/origin
    origin_port=$((port_base + 19))
    port_check "$origin_port"
    mkdir -p "$dir/www/nostore" "$dir/www/cache"
    head -c 1024 /dev/zero | tr '\0' 'a' >"$dir/www/nostore/1k"
    cp "$dir/www/nostore/1k" "$dir/www/cache/1k"
    head -c 65536 /dev/zero | tr '\0' 'b' >"$dir/www/cache/64k"
    head -c 1048576 /dev/urandom >"$dir/www/cache/1m"
    head -c 67108864 /dev/urandom >"$dir/www/cache/64m"
    : >"$dir/cache.log"
    chmod -R a+rX "$dir/www"
    cat >"$dir/scenario.conf" <<CONF
server {
    listen 127.0.0.1:$origin_port;
    root $dir/www;
    location /nostore/ { add_header Cache-Control "no-store"; }
    location /cache/ {
        add_header Cache-Control "max-age=3600";
        access_log $dir/cache.log;
    }
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

# Requests the origin has had for /cache/ so far (0 before it starts).
origin_fetches() {
    if [[ -f $work/origin/cache.log ]]; then wc -l <"$work/origin/cache.log" | tr -d ' '; else echo 0; fi
}

# ---------------------------------------------------------------------------
# Servers.  srv_X_start DIR PORT SCEN starts X (pinned to server_cpu) with the
# scenario's config and sets srv_pid.  A scenario of kind "proxy" maps
# everything to the origin; a server that cannot do a kind returns 3.

declare -A unavailable=()

# limit: the trivial epoll server (scripts/limit-server.c).
srv_limit_prepare() {
    gcc -O2 -o "$work/limit-server" "$CST_TOP/scripts/limit-server.c" 2>"$work/limit-build.log" ||
        unavailable[limit]="n/a (gcc failed: $(head -c 80 "$work/limit-build.log"))"
}

srv_limit_start() { # DIR PORT SCEN
    local fn=${3//-/_}
    "${srv_pin[@]}" "$work/limit-server" "$2" "$("scen_${fn}_size")" \
        "$("scen_${fn}_expect")" >"$1/stderr.log" 2>&1 &
    srv_pid=$!
    pids_to_stop+=("$srv_pid")
}

srv_cistern_prepare() {
    cistern_bin=${CISTERN_BIN:-}
    if [[ -z $cistern_bin ]]; then
        cistern_bin=$CST_TOP/_build/plain/cistern
        [[ ! -x $cistern_bin && -x $CST_TOP/cistern ]] && cistern_bin=$CST_TOP/cistern
        if [[ ! -x $cistern_bin ]]; then
            say "no $cistern_bin: building it"
            cst_ensure_packages "${CST_DEB_PACKAGES[@]}"
            cst_autogen
            cst_configure "$CST_TOP/_build/plain"
            cst_make "$CST_TOP/_build/plain"
        fi
    fi
    [[ -x $cistern_bin ]] || unavailable[cistern]="n/a (no binary at $cistern_bin)"
}

# cistern-nolog: Cistern with the access log off in hit-1k-log.
srv_cistern_nolog_prepare() { :; }
srv_cistern_nolog_start() { cistern_logging=1 srv_cistern_start "$@"; }

srv_cistern_start() { # DIR PORT SCEN
    local dir=$1 port=$2 scen=$3 logging=1 scheme listen kind extra=''
    scheme=$(scen_scheme "$scen")
    kind=$(scen_kind "$scen")
    listen=$port
    # push: the PR's records (a PUSH port, then the GET port); forward: no
    # rules needed.
    case $kind in
    push)
        listen="$(push_port "$port") $port"
        extra="CONFIG proxy.config.url_remap.remap_required INT 0
CONFIG proxy.config.http.cache.required_headers INT 0
CONFIG proxy.config.http.push_method_enabled INT 1"
        ;;
    forward) extra="CONFIG proxy.config.url_remap.remap_required INT 0" ;;
    esac
    # https: a TLS port with the run's certificate (copied: its files are
    # read relative to the config dir).
    if [[ $scheme == https ]]; then
        listen=$port:ssl
        cp "$work/tls/cert.pem" "$work/tls/key.pem" "$dir/"
        echo "dest_ip=* ssl_cert_name=cert.pem ssl_key_name=key.pem" >"$dir/ssl_multicert.config"
    fi
    # The matrix runs with access logs off (1: errors only); hit-1k-log
    # keeps Cistern's default (3: access and error logs).
    [[ $scen == hit-1k-log ]] && logging=${cistern_logging:-3}
    mkdir -p "$dir/run" "$dir/log"
    cat >"$dir/records.config" <<CONF
CONFIG proxy.config.http.server_ports STRING $listen
CONFIG proxy.config.cistern.workers INT 1
CONFIG proxy.config.cistern.run_dir STRING run
CONFIG proxy.config.log.logfile_dir STRING log
CONFIG proxy.config.log.logging_enabled INT $logging
CONFIG proxy.config.http.keep_alive_no_activity_timeout_in INT 120
CONFIG proxy.config.stop.shutdown_timeout INT 2
CONFIG proxy.config.admin.user_id STRING #-1
$extra
CONF
    cp "$CST_TOP/scripts/demo/ip_allow.config" "$dir/"
    local fn=${scen//-/_} store=256M
    declare -F "scen_${fn}_store" >/dev/null && store=$("scen_${fn}_store")
    echo "cache $store" >"$dir/storage.config"
    case $kind in
    proxy) echo "map $scheme://127.0.0.1:$port/ http://127.0.0.1:$origin_port/" >"$dir/remap.config" ;;
    redirect) echo "redirect http://127.0.0.1:$port/ http://b.test/" >"$dir/remap.config" ;;
    push) echo "map http://localhost:$port http://fakehost" >"$dir/remap.config" ;;
    forward)
        : >"$dir/remap.config"
        # The origin is on 127.0.0.1, which a forward proxy refuses without
        # a destination rule opening it (issue 19); a Cistern that does not
        # know dest_ip= lines yet (-t fails) goes without.
        cat >>"$dir/ip_allow.config" <<CONF
dest_ip=127.0.0.1 action=ip_allow method=ALL
CONF
        if ! "$cistern_bin" -c "$dir" -t >"$dir/check.log" 2>&1; then
            cp "$CST_TOP/scripts/demo/ip_allow.config" "$dir/"
        fi
        ;;
    *) return 3 ;;
    esac
    "${srv_pin[@]}" "$cistern_bin" -c "$dir" -f >"$dir/stderr.log" 2>&1 &
    srv_pid=$!
    pids_to_stop+=("$srv_pid")
}

srv_nginx_prepare() { :; } # nginx_bin is found up front: the origin needs it

srv_nginx_start() { # DIR PORT SCEN
    local dir=$1 port=$2 scen=$3 tls=''
    mkdir -p "$dir/cache"
    # https: TLS 1.2 and 1.3 with the run's certificate, session tickets
    # and a session cache; Cistern's TLS 1.3 suites in its order, the
    # server's choice (else nginx takes the client's AES-256 while Cistern
    # picks AES-128: the same suite for both).
    if [[ $(scen_scheme "$scen") == https ]]; then
        tls=" ssl"
        [[ $scen == h2-* ]] && tls=" ssl http2"
        tls="$tls;
    ssl_certificate $work/tls/cert.pem;
    ssl_certificate_key $work/tls/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_prefer_server_ciphers on;
    ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256;
    ssl_session_tickets on;
    ssl_session_cache shared:SSL:1m"
    fi
    case $("scen_${scen//-/_}_kind") in
    redirect)
        cat >"$dir/scenario.conf" <<CONF
server {
    listen 127.0.0.1:$port;
    location / { return 301 http://b.test\$request_uri; }
}
CONF
        ;;
    proxy)
        # proxy_cache honours the origin's max-age; proxy_cache_valid only
        # covers responses without one.  The cache is on disk, which is the
        # page cache here (nginx has no memory store).
        cat >"$dir/scenario.conf" <<CONF
proxy_cache_path $dir/cache levels=1:2 keys_zone=cst:16m max_size=256m inactive=1h use_temp_path=off;
upstream origin {
    server 127.0.0.1:$origin_port;
    keepalive 32;
    keepalive_requests 100000000;
}
server {
    listen 127.0.0.1:$port$tls;
    location / {
        proxy_pass http://origin;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_buffering on;
        proxy_cache cst;
        proxy_cache_valid 200 1h;
    }
}
CONF
        ;;
    *) return 3 ;;
    esac
    nginx_conf "$dir"
    "${srv_pin[@]}" "$nginx_bin" -p "$dir" -c "$dir/nginx.conf" \
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
worker_rlimit_nofile 16384;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    # as Debian's stock nginx.conf: cached files (proxy_cache) and static
    # files go out with sendfile (the 1m/64m hit rows compare with that)
    sendfile on;
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

# peer_install SERVER PACKAGE BINARY: find BINARY, installing PACKAGE when
# missing (as root); sets unavailable[SERVER] when that fails.
peer_install() {
    local srv=$1 pkg=$2 bin=$3
    command -v "$bin" >/dev/null 2>&1 && return 0
    if ((EUID != 0)); then
        unavailable[$srv]="n/a ($pkg not installed; not root)"
        return 0
    fi
    say "installing $pkg"
    if ! (cst_ensure_packages "$pkg") >"$work/install-$pkg.log" 2>&1; then
        unavailable[$srv]="n/a (apt-get install $pkg failed)"
        return 0
    fi
    command -v "$bin" >/dev/null 2>&1 || unavailable[$srv]="n/a ($pkg has no $bin)"
}

# varnish: one thread pool; threads made up front (100: above the largest
# load's connection count, so no run waits for thread creation); idle
# sessions kept 120 s (the default 5 s would close the idle-conn test's);
# -j none: no jail, as root in a temp dir.
srv_varnish_prepare() { peer_install varnish varnish varnishd; }

srv_varnish_start() { # DIR PORT SCEN
    local dir=$1 port=$2 scen=$3
    [[ $("scen_${scen//-/_}_kind") == proxy ]] || return 3
    "${srv_pin[@]}" varnishd -F -j none -n "$dir/n" \
        -a "127.0.0.1:$port" -b "127.0.0.1:$origin_port" -s malloc,256m \
        -p thread_pools=1 -p thread_pool_min=110 -p thread_pool_max=1000 \
        -p timeout_idle=120 >"$dir/stderr.log" 2>&1 &
    srv_pid=$!
    pids_to_stop+=("$srv_pid")
}

# squid: an accelerator (reverse proxy) for the origin, one worker, a memory
# cache only, no access log, no pinger; forward: a plain forward proxy
# (no accel, no peer), the same cache.
srv_squid_prepare() { peer_install squid squid squid; }

srv_squid_start() { # DIR PORT SCEN
    local dir=$1 port=$2 scen=$3 user='' front
    case $(scen_kind "$scen") in
    proxy)
        front="http_port 127.0.0.1:$port accel defaultsite=127.0.0.1 vhost
cache_peer 127.0.0.1 parent $origin_port 0 no-query originserver name=origin
cache_peer_access origin allow all"
        ;;
    forward) front="http_port 127.0.0.1:$port" ;;
    *) return 3 ;;
    esac
    if ((EUID == 0)); then
        user="cache_effective_user $(id -un proxy 2>/dev/null || echo nobody)"
    fi
    cat >"$dir/squid.conf" <<CONF
$front
http_access allow all
workers 1
cache_mem 256 MB
maximum_object_size_in_memory 1 MB
memory_cache_shared off
access_log none
cache_store_log none
cache_log $dir/cache.log
pid_filename $dir/squid.pid
coredump_dir $dir
$user
pinger_enable off
shutdown_lifetime 1 seconds
client_persistent_connections on
server_persistent_connections on
client_idle_pconn_timeout 120 seconds
max_filedescriptors 16384
via off
forwarded_for delete
logfile_rotate 0
CONF
    [[ -n $user ]] && chown -R "${user##* }" "$dir"
    "${srv_pin[@]}" squid -N -f "$dir/squid.conf" >"$dir/stderr.log" 2>&1 &
    srv_pid=$!
    pids_to_stop+=("$srv_pid")
}

# ats: traffic_server alone (no traffic_manager) with a private runroot: its
# runroot.yaml points every directory into DIR.  One ET_NET thread (the
# accept threads off: accept on it), one task thread, one AIO thread; a
# 256 MB cache file and a 256 MB RAM cache; no logging; no Via.  push:
# the PR's records.config and remap.config (two ports, PUSH enabled, no
# remap required); forward: a forward proxy (no remap required, reverse
# proxying off).  ip_allow.yaml lets every address use every method (PUSH
# included; ATS 9's stock file allows PUSH from loopback only, which is
# where the bench's nc runs anyway) and reach every destination.
srv_ats_prepare() { peer_install ats trafficserver traffic_server; }

srv_ats_start() { # DIR PORT SCEN
    local dir=$1 port=$2 scen=$3 kind ports remap_req=1 reverse=1 push=0 remap
    kind=$(scen_kind "$scen")
    ports=$port
    remap="map / http://127.0.0.1:$origin_port/"
    case $kind in
    proxy) [[ $(scen_scheme "$scen") == https ]] && ports=$port:ssl ;;
    push)
        ports="$(push_port "$port") $port" remap_req=0 push=1
        remap="map http://localhost:$port http://fakehost"
        ;;
    forward) remap_req=0 reverse=0 remap='' ;;
    *) return 3 ;;
    esac
    cst_ats_runroot "$dir"
    # https: the run's certificate (ATS 9 speaks h2 and http/1.1 on an ssl
    # port by default)
    [[ $(scen_scheme "$scen") == https ]] &&
        echo "dest_ip=* ssl_cert_name=$work/tls/cert.pem ssl_key_name=$work/tls/key.pem" \
            >"$dir/etc/ssl_multicert.config"
    cat >"$dir/etc/records.config" <<CONF
CONFIG proxy.config.http.server_ports STRING $ports
CONFIG proxy.config.exec_thread.autoconfig INT 0
CONFIG proxy.config.exec_thread.limit INT 1
CONFIG proxy.config.accept_threads INT 0
CONFIG proxy.config.task_threads INT 1
CONFIG proxy.config.cache.threads_per_disk INT 1
CONFIG proxy.config.log.logging_enabled INT 0
CONFIG proxy.config.url_remap.remap_required INT $remap_req
CONFIG proxy.config.reverse_proxy.enabled INT $reverse
CONFIG proxy.config.http.push_method_enabled INT $push
CONFIG proxy.config.admin.user_id STRING #-1
CONFIG proxy.config.cache.ram_cache.size INT 268435456
CONFIG proxy.config.http.keep_alive_no_activity_timeout_in INT 120
CONFIG proxy.config.net.connections_throttle INT 30000
CONFIG proxy.config.diags.debug.enabled INT 0
CONFIG proxy.config.http.insert_response_via_str INT 0
CONFIG proxy.config.http.cache.required_headers INT 0
CONF
    echo "$dir/cache 256M" >"$dir/etc/storage.config"
    echo "$remap" >"$dir/etc/remap.config"
    cat >"$dir/etc/ip_allow.yaml" <<CONF
ip_allow:
  - apply: in
    ip_addrs: 0/0
    action: allow
    methods: ALL
  - apply: out
    ip_addrs: 0/0
    action: allow
    methods: ALL
CONF
    echo "logging: {}" >"$dir/etc/logging.yaml"
    (cd "$dir" && exec "${srv_pin[@]}" traffic_server \
        --run-root="$dir/runroot.yaml" >"$dir/stderr.log" 2>&1) &
    srv_pid=$!
    pids_to_stop+=("$srv_pid")
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

# wait_http URL STATUS PID [SECONDS [PROXY]]: poll until URL answers STATUS
# (default 5 s), while PID lives; through the forward proxy PROXY if given.
wait_http() {
    local url=$1 want=$2 pid=$3 secs=${4:-5} i got px=()
    [[ -n ${5:-} ]] && px=(-x "http://$5")
    for ((i = 0; i < secs * 20; i++)); do
        kill -0 "$pid" 2>/dev/null || return 1
        got=$(curl -sk "${px[@]}" -o /dev/null -w '%{http_code}' --max-time 1 "$url" || true)
        [[ $got == "$want" ]] && return 0
        sleep 0.05
    done
    return 1
}

# check_hit SRV URL SIZE [PROXY]: after the warming GET, is the next GET a
# hit, of SIZE body bytes?  Prints the reason on stdout when not.  Up to 3
# tries (a store may complete just after the response).
check_hit() {
    local srv=$1 url=$2 size=$3 try before after hdrs got px=()
    [[ -n ${4:-} ]] && px=(-x "http://$4")
    for ((try = 0; try < 3; try++)); do
        before=$(origin_fetches)
        hdrs=$(curl -sk "${px[@]}" -D - -o /dev/null -w 'size_download=%{size_download}\n' \
            --max-time 5 "$url" || true)
        after=$(origin_fetches)
        got=$(awk -F= '/^size_download=/ { print $2 }' <<<"$hdrs")
        if [[ $got != "$size" ]]; then
            echo "the second GET had $got body bytes, not $size"
            return 0
        fi
        if ((after == before)); then
            if [[ $srv == cistern* ]] &&
                ! grep -qi '^Cache-Status: cistern; hit' <<<"$hdrs"; then
                echo "no 'Cache-Status: cistern; hit' on the second GET"
                return 0
            fi
            return 0
        fi
        sleep 0.3
    done
    echo "not a cache hit: the second GET reached the origin"
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

# stop_tree PID: stop PID and whatever it left behind (processes that were
# in its tree when called).
stop_tree() {
    local pids p
    pids=$(tree_pids "$1" | tail -n +2)
    stop_pid "$1"
    for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
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

# idle_conns.py PORT PATH N READYFILE: open N keep-alive connections, one
# complete GET on each, write READYFILE, then hold them until killed.
write_idle_client() {
    cat >"$work/idle_conns.py" <<'PY'
import resource, socket, sys, time
port, path, n, ready = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, n + 100)), hard))
req = ("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (path, port)).encode()
conns = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(req)
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            sys.exit("connection %d closed before a response" % i)
        buf += d
    head, body = buf.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    while len(body) < length:
        d = s.recv(65536)
        if not d:
            sys.exit("connection %d closed mid-body" % i)
        body += d
    conns.append(s)
time.sleep(0.5)
# every connection must still be open (a server that closed idle ones
# would look cheap)
open_ = 0
for s in conns:
    s.setblocking(False)
    try:
        s.recv(1)              # b"": closed by the server; data: unexpected
    except BlockingIOError:
        open_ += 1             # nothing to read: still open and idle
    except OSError:
        pass
with open(ready, "w") as f:
    f.write("%d\n" % open_)
time.sleep(300)
PY
}

# run_idle PID PORT PATH N OUT: memory per idle connection; writes
# "bytes_per_conn - errors" to OUT.
run_idle() {
    local pid=$1 port=$2 path=$3 n=$4 out=$5 before after cpid i open_=0 err=0
    rm -f "$out.ready"
    sleep 0.3
    before=$(tree_rss_anon "$pid")
    "${cli_pin[@]}" python3 "$work/idle_conns.py" "$port" "$path" "$n" \
        "$out.ready" >"$out.log" 2>&1 &
    cpid=$!
    for ((i = 0; i < 600; i++)); do
        [[ -s $out.ready ]] && break
        kill -0 "$cpid" 2>/dev/null || break
        sleep 0.1
    done
    if [[ -s $out.ready ]]; then
        sleep 0.5
        after=$(tree_rss_anon "$pid")
        open_=$(<"$out.ready")
        ((open_ == n)) || err="$((n - open_))_closed"
        echo "$(((after - before) * 1024 / n)) - $err" >"$out"
    else
        echo "0 - failed:$(tail -c 60 "$out.log" | tr -s ' \r\n' ' ')" >"$out"
    fi
    kill "$cpid" 2>/dev/null || true
    wait "$cpid" 2>/dev/null || true
}

# run_load TOOL CONNS URL EXPECT OUT [PROXY]: one run (ab through the
# forward proxy PROXY if given); writes "rps p50ms p99ms errors" to OUT.
# h2load has no percentiles (p50/p99 "?"); its errors are one word (spaces
# as "_"): how many of how many requests failed (failed, errored, timed out
# or not 2xx), with the non-2xx status classes; or that none completed.
run_load() {
    local tool=$1 conns=$2 url=$3 expect=$4 out=$5 log=$5.log rps p50 p99 err f n px=()
    [[ -n ${6:-} ]] && px=(-X "$6")
    case $tool in
    ab)
        "${cli_pin[@]}" ab -q -k "${px[@]}" -n "$requests" -c "$conns" "$url" \
            >"$log" 2>&1 || true
        rps=$(awk '/^Requests per second:/ { print $4 }' "$log")
        p50=$(awk '$1 == "50%" { print $2 }' "$log")
        p99=$(awk '$1 == "99%" { print $2 }' "$log")
        err=$(awk '/^Failed requests:/ { f += $3 } /^Non-2xx responses:/ { n += $3 }
                   END { print f + 0, n + 0 }' "$log")
        # Non-2xx is expected for redirect scenarios.
        read -r f n <<<"$err"
        if [[ $expect == 2* ]]; then err=$((f + n)); else err=$((f + (requests - n))); fi
        ;;
    wrk)
        # wrk's default 2 s timeout counts a slow 64 MiB answer as an error
        "${cli_pin[@]}" wrk -t1 -c "$conns" -d "${duration}s" --timeout 30s --latency \
            "$url" >"$log" 2>&1 || true
        rps=$(awk '/^Requests\/sec:/ { print $2 }' "$log")
        p50=$(awk '$1 == "50%" { print $2 }' "$log")
        p99=$(awk '$1 == "99%" { print $2 }' "$log")
        [[ -n $p50 ]] && p50=$(wrk_ms "$p50")
        [[ -n $p99 ]] && p99=$(wrk_ms "$p99")
        err=$(awk '/Socket errors:/ { gsub(",", ""); s = $4 + $6 + $8 + $10 }
                   /Non-2xx or 3xx responses:/ { n = $5 }
                   END { print s + n }' "$log")
        ;;
    h2load | h2)
        # "finished in 3.00s, 31700.00 req/s, 1.94GB/s"; "requests: T
        # total, S started, D done, OK succeeded, F failed, E errored, X
        # timeout"; "status codes: A 2xx, B 3xx, C 4xx, D 5xx".
        local mode=(--h1)
        [[ $tool == h2 ]] && mode=(-m 10)
        timeout $((duration + 60)) "${cli_pin[@]}" h2load "${mode[@]}" -t 1 -c "$conns" \
            -D "$duration" "$url" >"$log" 2>&1 || true
        rps=$(awk '/^finished in/ { print $4 }' "$log")
        p50='?' p99='?'
        err=$(awk '/^requests:/ { gsub(",", ""); t = $2; ok = $8; bad = $10 + $12 + $14 }
                   /^status codes:/ { gsub(",", ""); s3 = $5; s4 = $7; s5 = $9; nx = s3 + s4 + s5 }
                   END { if (t + 0 == 0) print "no_request_completed"
                         else if (ok + 0 == 0 || bad + nx > 0)
                             printf "%d_of_%d_requests_failed_or_not_2xx_(3xx/4xx/5xx:_%d/%d/%d)\n",
                                 (ok + 0 == 0 ? t : bad + nx), t, s3, s4, s5
                         else print 0 }' "$log")
        ;;
    esac
    [[ -n $rps ]] || { rps=0; err=failed; }
    echo "$rps ${p50:-?} ${p99:-?} $err" >"$out"
}

# Median of the numbers on stdin ("-" when none).
median() {
    sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "-"; exit }
        if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# med KEY ARRAY: median of the numeric values stored in ARRAY[KEY].
med() {
    local -n arr=$2
    tr ' ' '\n' <<<"${arr[$1]:-}" | { grep -E '^-?[0-9.]+$' || true; } | median
}

# ratio A B [FORMAT]: A / B, or "-".
ratio() {
    awk -v a="$1" -v b="$2" -v f="${3:-%.2f}" 'BEGIN {
        if (a == "-" || b == "-" || b + 0 <= 0) print "-"; else printf f, a / b }'
}

# ---------------------------------------------------------------------------
# Arguments.

set_tools_given=0
while (($#)); do
    case $1 in
    --scenario) need_arg "$@"; scenarios+=("$2"); shift ;;
    --list) list_scenarios; exit 0 ;;
    --servers) need_arg "$@"; IFS=, read -r -a servers <<<"$2"; shift ;;
    --tools) need_arg "$@"; IFS=, read -r -a tools <<<"$2"; set_tools_given=1; shift ;;
    --rounds) need_arg "$@"; need_int "$1" "$2"; rounds=$2; shift ;;
    --quick) quick=1 rounds=1 duration=2 requests=20000 idle_conns=200 ;;
    --duration) need_arg "$@"; need_int "$1" "$2"; duration=$2; shift ;;
    --requests) need_arg "$@"; need_int "$1" "$2"; requests=$2; shift ;;
    --concurrency) need_arg "$@"; need_int "$1" "$2"; concurrency=$2; shift ;;
    --idle-conns) need_arg "$@"; need_int "$1" "$2"; idle_conns=$2; shift ;;
    --server-cpu) need_arg "$@"; need_int "$1" "$2"; server_cpu=$2; shift ;;
    --client-cpu) need_arg "$@"; need_int "$1" "$2"; client_cpu=$2; shift ;;
    --origin-cpu) need_arg "$@"; need_int "$1" "$2"; origin_cpu=$2; shift ;;
    --port-base) need_arg "$@"; need_int "$1" "$2"; port_base=$2; shift ;;
    --nice) need_arg "$@"; [[ $2 =~ ^-?[0-9]+$ ]] || { echo "bench.sh: --nice: not a number: $2" >&2; exit 2; }; nice_level=$2; shift ;;
    --keep) keep=1 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
    shift
done
: "$set_tools_given"
((quick)) && say "quick: a smoke run, not figures to quote"
((${#scenarios[@]})) || scenarios=("${DEFAULT_SCENARIOS[@]}")
for s in "${scenarios[@]}"; do
    declare -F "scen_${s//-/_}_desc" >/dev/null ||
        { echo "bench.sh: unknown scenario '$s' (see --list)" >&2; exit 2; }
done
for s in "${servers[@]}"; do
    declare -F "srv_${s}_start" >/dev/null ||
        { echo "bench.sh: unknown server '$s' (known: ${ALL_SERVERS[*]})" >&2; exit 2; }
done
# The limit is every figure's denominator: always run it, first.
sel=(limit)
for s in "${servers[@]}"; do [[ $s == limit ]] || sel+=("$s"); done
servers=("${sel[@]}")
for s in "${tools[@]}"; do
    [[ " ${ALL_TOOLS[*]} " == *" $s "* ]] ||
        { echo "bench.sh: unknown tool '$s' (known: ${ALL_TOOLS[*]})" >&2; exit 2; }
done
((rounds >= 1 && duration >= 1 && requests >= 1 && idle_conns >= 1)) ||
    { echo "bench.sh: counts must be at least 1" >&2; exit 2; }
[[ -z $concurrency ]] || ((concurrency >= 1)) ||
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
# The command prefixes that pin (and, with --nice, renice) servers and
# load generators.
srv_pin=(taskset -c "$server_cpu")
cli_pin=(taskset -c "$client_cpu")
if ((nice_level != 0)); then
    srv_pin+=(nice -n "$nice_level")
    cli_pin+=(nice -n "$nice_level")
fi

cst_ensure_packages apache2-utils wrk curl procps python3 gcc
# push-64k: nc (OpenBSD's, for -N) and h2load.
[[ " ${scenarios[*]} " == *" push-64k "* ]] && cst_ensure_packages netcat-openbsd nghttp2-client
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
    # The package may start a system nginx on port 80; it does not matter here.
fi
# 1000 idle connections and 100 busy ones per server, plus the origin's.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

work=$(mktemp -d /tmp/cistern-bench.XXXXXX)
# Unprivileged workers (nginx's nobody, squid's proxy) must read their dirs.
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

for s in "${servers[@]}"; do "srv_${s}_prepare"; done
write_idle_client

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
say "servers on CPU $server_cpu, load on CPU $client_cpu, origin on CPU ${origin_cpu:-any}, nice $nice_level; load average $load_start"
say "rounds $rounds, ab -k -n $requests, wrk -t1 -d ${duration}s, idle connections $idle_conns"

# load_url PORT: the URL the load asks for from a server on PORT; and
# load_proxy PORT: the forward proxy it goes through ("" when none).
load_url() {
    if [[ $kind == forward ]]; then
        echo "http://127.0.0.1:$origin_port$path"
    else
        echo "$scheme://$host:$1$path"
    fi
}
load_proxy() { [[ $kind != forward ]] || echo "127.0.0.1:$1"; }

# start_server SRV DIR: start SRV for the current scenario ($scen, $path,
# $expect, $want_hit, $kind) in DIR on its port; for a push scenario, PUSH
# the object (201 expected); check that it answers and, for a hit
# scenario, that the second GET is a hit.  Sets srv_pid and port, or
# note[$scen|SRV] (and returns 1) when it cannot be measured.
start_server() {
    local srv=$1 dir=$2 rc=0 got why i url proxy pushed px=()
    # A fixed port per server: its index in ALL_SERVERS (cistern-nolog: next).
    port=$((port_base + ${#ALL_SERVERS[@]}))
    for ((i = 0; i < ${#ALL_SERVERS[@]}; i++)); do
        [[ ${ALL_SERVERS[i]} == "$srv" ]] && port=$((port_base + i))
    done
    port_check "$port"
    [[ $kind == push ]] && port_check "$(push_port "$port")"
    mkdir -p "$dir"
    chmod 755 "$work/$scen" "$work/$scen/$srv"
    "srv_${srv//-/_}_start" "$dir" "$port" "$scen" || rc=$?
    if ((rc == 3)); then
        note[$scen|$srv]="n/a (scenario not supported)"
        return 1
    fi
    url=$(load_url "$port") proxy=$(load_proxy "$port")
    [[ -n $proxy ]] && px=(-x "http://$proxy")
    if [[ $kind == push && $srv != limit ]]; then
        pushed=$(push_object "$dir" "$(push_port "$port")" "$srv_pid")
        if [[ $pushed != 201 ]]; then
            if kill -0 "$srv_pid" 2>/dev/null; then
                note[$scen|$srv]="n/a (PUSH answered ${pushed:-nothing}, expected 201)"
            else
                note[$scen|$srv]="n/a (did not start: $(tail -n 3 "$dir/stderr.log" 2>/dev/null | tr -s '\r\n\t' '   ' | tail -c 100))"
            fi
            say "$srv: ${note[$scen|$srv]}"
            stop_tree "$srv_pid"
            return 1
        fi
    fi
    if ! wait_http "$url" "$expect" "$srv_pid" 30 "$proxy"; then
        got=$(curl -sk "${px[@]}" -o "$dir/probe.body" -w '%{http_code}' --max-time 2 "$url" || true)
        if kill -0 "$srv_pid" 2>/dev/null; then
            note[$scen|$srv]="n/a (HTTP ${got:-none}, expected $expect)"
        else
            note[$scen|$srv]="n/a (did not start: $(tail -n 3 "$dir/stderr.log" 2>/dev/null | tr -s '\r\n\t' '   ' | tail -c 100))"
        fi
        say "$srv: ${note[$scen|$srv]}"
        stop_tree "$srv_pid"
        return 1
    fi
    if ((want_hit)) && [[ $srv != limit ]]; then
        why=$(check_hit "$srv" "$url" "$("scen_${scen//-/_}_size")" "$proxy")
        if [[ -n $why ]]; then
            note[$scen|$srv]="n/a ($why)"
            say "$srv: ${note[$scen|$srv]}"
            stop_tree "$srv_pid"
            return 1
        fi
    fi
    return 0
}

declare -A res_rps=() res_p50=() res_p99=() res_rss=() res_err=() note=() fetched=()
declare -A res_org=() warm_org=() failed_run=()
rows=()      # "scen|tool|conns" in print order

for scen in "${scenarios[@]}"; do
    fn=${scen//-/_}
    say "scenario $scen: $("scen_${fn}_desc")"
    "scen_${fn}_setup"
    path=$("scen_${fn}_path")
    expect=$("scen_${fn}_expect")
    want_hit=$("scen_${fn}_hit")
    scheme=$(scen_scheme "$scen")
    host=$(scen_host "$scen")
    kind=$(scen_kind "$scen")
    applies=" ${ALL_SERVERS[*]} "
    declare -F "scen_${fn}_servers" >/dev/null && applies=" $("scen_${fn}_servers") "
    # The scenario's runs: TOOL:CONNS, filtered by --tools.
    runs=()
    for tc in $("scen_${fn}_tools"); do
        t=${tc%%:*} c=${tc#*:}
        [[ " ${tools[*]} " == *" $t "* ]] || continue
        [[ -n $concurrency && $t != idle && $c != 1 ]] && c=$concurrency
        runs+=("$t:$c")
        rows+=("$scen|$t|$c")
    done
    ((${#runs[@]})) || continue
    scen_servers=()
    for srv in "${servers[@]}" cistern-nolog; do
        [[ $srv == cistern-nolog && " ${servers[*]} " != *" cistern "* ]] && continue
        if [[ $applies != *" $srv "* ]]; then
            [[ $srv != cistern-nolog ]] && note[$scen|$srv]="-"
            continue
        fi
        if [[ -n ${unavailable[${srv%-nolog}]:-} ]]; then
            note[$scen|$srv]=${unavailable[${srv%-nolog}]}
            continue
        fi
        scen_servers+=("$srv")
    done
    declare -A spid=() sport=()
    live=()
    if [[ ${runs[0]%%:*} == idle ]]; then
        # Memory per idle connection: a fresh server for every measurement
        # (one that served a round before would reuse memory freed then).
        for ((r = 1; r <= rounds; r++)); do
            order=("${scen_servers[@]}")
            ((r % 2 == 0)) && mapfile -t order < <(printf '%s\n' "${scen_servers[@]}" | tac)
            for srv in "${order[@]}"; do
                [[ -n ${note[$scen|$srv]:-} ]] && continue
                start_server "$srv" "$work/$scen/$srv/r$r" || continue
                for tc in "${runs[@]}"; do
                    conns=${tc#*:}
                    key="$scen|idle|$conns|$srv"
                    out=$work/$scen/$srv/idle.$conns.$r
                    run_idle "$srv_pid" "$port" "$path" "$conns" "$out"
                    read -r bytes _ err <"$out"
                    res_rps[$key]+="$bytes "
                    [[ $err != 0 ]] && res_err[$key]="${res_err[$key]:-}$err "
                    say "round $r idle $srv: $bytes B per idle connection ($conns), errors $err"
                done
                stop_tree "$srv_pid"
            done
        done
        continue
    fi
    for srv in "${scen_servers[@]}"; do
        f0=$(origin_fetches)
        start_server "$srv" "$work/$scen/$srv" || continue
        # The warm-up load: the scenario's first tool's kind of client.
        case ${runs[0]%%:*} in
        h2load)
            "${cli_pin[@]}" h2load --h1 -t 1 -c 40 -D "$warmup" "$(load_url "$port")" \
                >/dev/null 2>&1 || true
            ;;
        h2)
            # a count, not -D, and a time limit: h2load 1.52 over TLS was
            # seen to wait forever after -D on connections the server had
            # not accepted yet (nginx and ATS both)
            timeout 60 "${cli_pin[@]}" h2load -m 10 -t 1 -c 40 -n 4000 "$(load_url "$port")" \
                >/dev/null 2>&1 || true
            ;;
        *)
            if [[ $kind == forward ]]; then
                "${cli_pin[@]}" ab -q -k -c 10 -n 2000 -X "$(load_proxy "$port")" \
                    "$(load_url "$port")" >/dev/null 2>&1 || true
            else
                "${cli_pin[@]}" wrk -t1 -c 50 -d "${warmup}s" "$(load_url "$port")" \
                    >/dev/null 2>&1 || true
            fi
            ;;
        esac
        warm_org[$scen|$srv]=$(($(origin_fetches) - f0))
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
        for tc in "${runs[@]}"; do
            tool=${tc%%:*} conns=${tc#*:}
            for srv in "${order[@]}"; do
                key="$scen|$tool|$conns|$srv"
                out=$work/$scen/$srv/$tool.$conns.$r
                f0=$(origin_fetches)
                rss_sampler "${spid[$srv]}" "$out.rss" &
                sampler=$!
                run_load "$tool" "$conns" "$(load_url "${sport[$srv]}")" "$expect" "$out" \
                    "$(load_proxy "${sport[$srv]}")"
                kill "$sampler" 2>/dev/null || true
                wait "$sampler" 2>/dev/null || true
                f1=$(origin_fetches)
                read -r rps p50 p99 err <"$out"
                rss=$(cat "$out.rss" 2>/dev/null || echo 0)
                res_rps[$key]+="$rps "
                res_p50[$key]+="$p50 "
                res_p99[$key]+="$p99 "
                ((rss > ${res_rss[$key]:-0})) && res_rss[$key]=$rss
                # h2load: a run with failures is no figure (n/a, and why).
                if [[ ($tool == h2load || $tool == h2) && $err != 0 ]]; then
                    failed_run[$key]="h2load: ${err//_/ }"
                elif [[ $err != 0 ]]; then
                    res_err[$key]="${res_err[$key]:-}$err "
                fi
                ((f1 > f0)) && fetched[$key]=$((${fetched[$key]:-0} + f1 - f0))
                res_org[$key]+="$((f1 - f0)) "
                say "round $r $tool -c$conns $srv: $rps req/s, p50 $p50 ms, p99 $p99 ms, RssAnon $rss KiB, errors $err"
            done
        done
    done
    for srv in "${live[@]}"; do stop_tree "${spid[$srv]}"; done
    unset spid sport
done

# ---------------------------------------------------------------------------
# The tables.

row_label() { # scen tool conns
    case $2 in
    idle) echo "$1 (B/conn, N=$3)" ;;
    ab) if [[ $(scen_kind "$1") == forward ]]; then echo "$1 ab -X -c$3"; else echo "$1 ab -c$3"; fi ;;
    *) echo "$1 $2 -c$3" ;;
    esac
}

cols=("${servers[@]:1}") # the peers; the limit gets its own column
w=24

printf '\n== req/s as a fraction of the limit server'"'"'s (median of %d rounds; idle-conn: bytes)\n' "$rounds"
printf '%-*s %11s' "$w" row 'limit req/s'
for s in "${cols[@]}"; do printf ' %8s' "$s"; done
printf ' %14s\n' 'cistern/nginx'
for row in "${rows[@]}"; do
    IFS='|' read -r scen tool conns <<<"$row"
    k="$scen|$tool|$conns"
    printf '%-*s' "$w" "$(row_label "$scen" "$tool" "$conns")"
    lim=$(med "$k|limit" res_rps)
    # A scenario without the limit (https-hit-1k): req/s in the cells.
    nolimit=0
    [[ ${note[$scen|limit]:-} == - ]] && nolimit=1
    if [[ $tool == idle ]]; then
        printf ' %11s' "$lim"
    else
        printf ' %11s' "$(ratio "$lim" 1 %.0f)"
    fi
    for s in "${cols[@]}"; do
        v=$(med "$k|$s" res_rps)
        [[ -n ${failed_run[$k|$s]:-} ]] && v=-
        if [[ $v == - ]]; then
            cell=-
            [[ ${note[$scen|$s]:-} == n/a* || -n ${failed_run[$k|$s]:-} ]] && cell=n/a
        elif [[ $tool == idle ]]; then
            cell=$v
        elif ((nolimit)); then
            cell=$(ratio "$v" 1 %.0f)
        else
            cell=$(ratio "$v" "$lim")
        fi
        printf ' %8s' "$cell"
    done
    printf ' %14s\n' "$(ratio "$(med "$k|cistern" res_rps)" "$(med "$k|nginx" res_rps)")"
done

# The origin's requests, for the forward-proxy rows: a proxy that caches
# sends it none during a run.
org_rows=()
for row in "${rows[@]}"; do
    IFS='|' read -r scen tool conns <<<"$row"
    [[ $(scen_kind "$scen") == forward ]] && org_rows+=("$row")
done
if ((${#org_rows[@]})); then
    printf '\n== the origin'"'"'s requests during a run of %d (median); in parentheses, before the runs (start check, warm-up)\n' "$requests"
    printf '%-*s' "$w" row
    for s in "${servers[@]}"; do printf ' %12s' "$s"; done
    printf '\n'
    for row in "${org_rows[@]}"; do
        IFS='|' read -r scen tool conns <<<"$row"
        k="$scen|$tool|$conns"
        printf '%-*s' "$w" "$(row_label "$scen" "$tool" "$conns")"
        for s in "${servers[@]}"; do
            v=$(med "$k|$s" res_org)
            [[ $v != - ]] && v="$v (${warm_org[$scen|$s]:-0})"
            printf ' %12s' "$v"
        done
        printf '\n'
    done
fi

printf '\n== latency p50 / p99, ms (median of %d rounds; h2load has no percentiles)\n' "$rounds"
printf '%-*s' "$w" row
for s in "${servers[@]}"; do printf ' %15s' "$s"; done
printf '\n'
for row in "${rows[@]}"; do
    IFS='|' read -r scen tool conns <<<"$row"
    [[ $tool == idle || $tool == h2load || $tool == h2 ]] && continue
    k="$scen|$tool|$conns"
    printf '%-*s' "$w" "$(row_label "$scen" "$tool" "$conns")"
    for s in "${servers[@]}"; do
        a=$(med "$k|$s" res_p50) b=$(med "$k|$s" res_p99)
        if [[ $a == - && $b == - ]]; then printf ' %15s' -; else printf ' %15s' "$a/$b"; fi
    done
    printf '\n'
done

printf '\n== peak RssAnon during the run, KiB (all of the server'"'"'s processes)\n'
printf '%-*s' "$w" row
for s in "${servers[@]}"; do printf ' %9s' "$s"; done
printf '\n'
for row in "${rows[@]}"; do
    IFS='|' read -r scen tool conns <<<"$row"
    [[ $tool == idle ]] && continue
    k="$scen|$tool|$conns"
    printf '%-*s' "$w" "$(row_label "$scen" "$tool" "$conns")"
    for s in "${servers[@]}"; do printf ' %9s' "${res_rss[$k|$s]:--}"; done
    printf '\n'
done

# fig KEY SRV: SRV's median req/s for the row KEY, "-" when it failed.
fig() {
    if [[ -n ${failed_run[$1|$2]:-} ]]; then echo -; else ratio "$(med "$1|$2" res_rps)" 1 %.0f; fi
}

# peer_figures KEY SRV...: "srv N req/s, ..." for the row KEY.
peer_figures() {
    local k=$1 s out=''
    shift
    for s in "$@"; do
        [[ " ${cols[*]} " == *" $s "* ]] || continue
        out+="${out:+, }$s $(fig "$k" "$s") req/s"
    done
    echo "$out"
}

# Targets of issue 12 that these numbers speak to, for Cistern.
summary=()
for row in "${rows[@]}"; do
    IFS='|' read -r scen tool conns <<<"$row"
    k="$scen|$tool|$conns"
    c=$(med "$k|cistern" res_rps) l=$(med "$k|limit" res_rps)
    case $scen in
    hit-1k | hit-64k | proxy-1k)
        t=0.80
        [[ $scen == hit-64k ]] && t=0.95
        [[ $scen == proxy-1k ]] && t=0.45
        summary+=("$scen $tool: Cistern $(ratio "$c" "$l") of the limit (target >= $t), $(ratio "$c" "$(med "$k|nginx" res_rps)") x nginx")
        ;;
    conn-1)
        summary+=("conn-1: Cistern p50 / limit p50 = $(ratio "$(med "$k|cistern" res_p50)" "$(med "$k|limit" res_p50)") (target <= 1.3)")
        ;;
    hit-1k-log)
        b=$(med "$k|cistern-nolog" res_rps)
        [[ $b != - && $c != - ]] &&
            summary+=("access log on, $tool: costs $(awk -v a="$c" -v b="$b" 'BEGIN { printf "%.1f%%", (1 - a / b) * 100 }') of hit throughput ($(ratio "$c" 1 %.0f) vs $(ratio "$b" 1 %.0f) req/s with it off, same rounds; target < 10%)")
        ;;
    https-hit-1k)
        n=$(med "$k|nginx" res_rps)
        summary+=("$scen $tool: Cistern $(ratio "$c" 1 %.0f) req/s, nginx (TLS, proxy_cache) $(ratio "$n" 1 %.0f) req/s: $(ratio "$c" "$n") x nginx (no limit over TLS: cells are req/s)")
        ;;
    idle-conn)
        summary+=("idle keep-alive connection: Cistern $c B, nginx $(med "$k|nginx" res_rps) B (target: below nginx)")
        ;;
    push-64k)
        summary+=("$scen $tool -c$conns (ATS PR 7382): $(peer_figures "$k" cistern ats), Cistern/ATS $(ratio "$(fig "$k" cistern)" "$(fig "$k" ats)")")
        ;;
    forward-1k)
        summary+=("$scen $tool -X -c$conns (ATS wiki): req/s, and the origin's requests per run of $requests (before the runs):")
        for s in cistern ats squid; do
            [[ " ${cols[*]} " == *" $s "* ]] || continue
            summary+=("    $s $(fig "$k" "$s") req/s, origin $(med "$k|$s" res_org) ($((${warm_org[$scen|$s]:-0})))")
        done
        ;;
    esac
done

printf '\nNotes:\n'
for s in "${summary[@]}"; do printf '  %s\n' "$s"; done
for scen in "${scenarios[@]}"; do
    for s in "${servers[@]}"; do
        n=${note[$scen|$s]:-}
        [[ $n == n/a* ]] && printf '  %s %s: %s\n' "$scen" "$s" "$n"
    done
done
for k in "${!res_err[@]}"; do printf '  %s: errors per run: %s\n' "${k//|/ }" "${res_err[$k]}"; done
for k in "${!failed_run[@]}"; do printf '  %s: n/a (%s; --keep keeps its log)\n' "${k//|/ }" "${failed_run[$k]}"; done
for k in "${!fetched[@]}"; do printf '  %s: %s origin fetches of /cache/ during the runs\n' "${k//|/ }" "${fetched[$k]}"; done
printf '  load average (1, 5, 15 min) at the start %s, at the end %s: other work on the machine shares its CPUs\n' \
    "$load_start" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '  limit: scripts/limit-server.c (one thread, epoll, the same bytes from memory)\n'
printf '  CPUs: servers %s, load %s, origin %s; %s; %s\n' "$server_cpu" "$client_cpu" \
    "${origin_cpu:-any}" "$(nproc) CPUs" "$(lscpu 2>/dev/null | awk -F: '/Model name/ { gsub(/^ +/, "", $2); print $2; exit }')"
