#!/bin/bash
# bench-plugins.sh: issue 22's benchmark (the TS-4924 seed): wrk -t1 -c1
# -d10 on a cached 1 KiB generator URL (map ... @plugin=generator.so) and
# on the same object served by a plain map hit (a rule without plugins
# whose origin is the generator rule), then a rule with headers.so and
# cachekey.so active vs the same rule without them (wrk -c50, then ab -k
# -c100 for as long), for
# Cistern and, when traffic_server is installed, ATS with its own
# generator.so, cachekey.so and header_rewrite.so.
#
# Usage: scripts/bench-plugins.sh [-d SECONDS] [--no-ats] [--pin] [--pairs N]
#                                  [--twin N] [--control] [--only wrk|ab]
#                                  [--quota PCT]
#                                  [--port-base N]
#        --pin: the server on CPU 1, wrk and ab on CPU 0 (taskset), so
#        the two do not take turns on one core (steadier figures)
#        --pairs N: only the 3% question, asked N times: Cistern's rule
#        without plugins and with headers+cachekey, wrk -c50 then ab -k
#        -c100 each, in turns (ABBA: drift cancels), then the medians of
#        req/s and of the server's CPU time per request, and the rows'
#        difference in percent, round by round (median, mean +- 2 s.e.)
#        --twin N: the 3% question asked of two Cisterns at once, one on
#        each CPU with its own client beside it (wrk -c50, then ab -k -c100),
#        one serving the rule without plugins and the other with them, the
#        two swapping every round; N rounds.  What slows the machine for a
#        while slows both rows alike, and a round and the next (swapped)
#        together cancel any difference between the CPUs: the figures are
#        those pairs' differences (median, and mean +- 2 s.e.).  The server's
#        CPU time per request is its own; req/s also carries its client's
#        time (the same in both rows), so it moves less than the server's.
#        --control: --twin or --pairs with a second rule without plugins
#        in place of headers+cachekey (an A/A run): what the method reads as a
#        difference where there is none, this machine's floor.
#        --only TOOL: --twin or --pairs with that client alone.
#        --quota PCT: Cistern's server in a cgroup allowed PCT% of one CPU
#        (root; cgroup v1 cpu or v2): the server, not the client, bounds
#        req/s, so req/s measures the server's cost per request
#        CISTERN_BIN names the daemon (default _build/plain/cistern), its
#        plugins are the build's (plugins/ next to it).
set -euo pipefail
secs=10 ats=1 base=18480 srv_cpu=() cli_cpu=() pairs=0 quota=0 twin=0 with=both.test tools="wrk ab"
while (($#)); do
    case $1 in
    -d) secs=$2; shift 2 ;;
    --no-ats) ats=0; shift ;;
    --pin) srv_cpu=(taskset -c 1) cli_cpu=(taskset -c 0); shift ;;
    --pairs) pairs=$2; shift 2 ;;
    --twin) twin=$2; shift 2 ;;
    --control) with=plain2.test; shift ;;
    --only) tools=$2; shift 2 ;;
    --quota) quota=$2; shift 2 ;;
    --port-base) base=$2; shift 2 ;;
    -h | --help) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-plugins: unknown argument $1" >&2; exit 2 ;;
    esac
done
((twin > 0)) && srv_cpu=(taskset -c 1)
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/common.sh
. "$here/scripts/common.sh"
bin=${CISTERN_BIN:-$here/_build/plain/cistern}
pdir=$(cd "$(dirname "$bin")" && pwd)/plugins
command -v wrk >/dev/null || { echo "bench-plugins: wrk not installed" >&2; exit 1; }
tmp=$(mktemp -d /tmp/cistern-bench-plugins.XXXXXX)
chmod 755 "$tmp" # the workers' user must reach the store and the logs
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

wait_ok() { # URL HOST
    for _ in $(seq 100); do
        [[ $(curl -s -o /dev/null -w '%{http_code}' -H "Host: $2" "$1" || true) == 200 ]] && return 0
        sleep 0.1
    done
    echo "bench-plugins: $1 (Host $2) never answered 200" >&2; return 1
}
# tree_ticks PID: user CPU time (clock ticks) of PID and its children
# (Cistern's workers, ATS's traffic_server under its manager)
tree_ticks() {
    local t=0 p
    for p in $1 $(pgrep -P "$1" || true); do
        [[ -r /proc/$p/stat ]] || continue
        t=$((t + $(awk '{ sub(/^.*\) /, ""); print $12 }' "/proc/$p/stat")))
    done
    echo "$t"
}
# tree_ns PID: CPU time (user + system, in ns: the scheduler's own count,
# /proc/PID/task/*/schedstat, not sampled at ticks, steal time left out)
# of PID's threads and its children's
tree_ns() {
    local p
    for p in $1 $(pgrep -P "$1" || true); do
        cat /proc/"$p"/task/*/schedstat 2>/dev/null || true
    done | awk '{ t += $1 } END { printf "%.0f", t }'
}
# us_per_req NS REQUESTS: the server's CPU time per request, in us
us_per_req() {
    awk -v t="$1" -v n="$2" 'BEGIN { if (n > 0) printf "%.3f", t / 1e3 / n; else print "-" }'
}
# user_per_req TICKS REQUESTS: its user time per request, in us
user_per_req() {
    awk -v t="$1" -v n="$2" -v hz="$(getconf CLK_TCK)" \
        'BEGIN { if (n > 0) printf "%.2f", t * 1e6 / hz / n; else print "-" }'
}
# run NAME PORT HOST PATH CONNS [HIT-RE]: warm, check that the next answer
# is a hit (its head matches HIT-RE), then wrk; one row.  The last column
# is the server's CPU time per request (srv_pid's tree): on two cores
# shared with the client it varies far less from run to run than req/s.
run() {
    local name=$1 host=$3 c=$5 url="http://127.0.0.1:$2$4" hit=${6:-} out t0
    wait_ok "$url" "$host"
    curl -s -o /dev/null -H "Host: $host" "$url"
    if [[ -n $hit ]] && ! curl -s -D - -o /dev/null -H "Host: $host" "$url" | grep -qiE "$hit"; then
        echo "bench-plugins: $name: $url (Host $host) is not a cache hit; no figure taken" >&2
        return 1
    fi
    t0=$(tree_ns "$srv_pid")
    out=$("${cli_cpu[@]}" wrk -t1 -c"$c" -d"$secs" --latency -H "Host: $host" "$url")
    printf '%-34s %10s req/s  p50 %8s  mean %8s  cpu %6s us/req\n' "$name" \
        "$(awk '/Requests\/sec/ { print $2 }' <<<"$out")" \
        "$(awk '$1 == "50%" { print $2 }' <<<"$out")" \
        "$(awk '$1 == "Latency" { print $2; exit }' <<<"$out")" \
        "$(us_per_req $(($(tree_ns "$srv_pid") - t0)) "$(awk '/requests in/ { print $1 }' <<<"$out")")"
    if ((c > 1)); then  # the issue's second client: ab -k -c100, as many requests as wrk made
        t0=$(tree_ns "$srv_pid")
        out=$("${cli_cpu[@]}" ab -q -k -c100 -t"$secs" -n 5000000 -H "Host: $host" "$url" 2>&1)
        printf '%-34s %10s req/s  p50 %8s  failed %6s  cpu %6s us/req\n' "${name/-c50/ab -k -c100}" \
            "$(awk '/Requests per second/ { print $4 }' <<<"$out")" \
            "$(awk '$1 == "50%" { print $2 "ms" }' <<<"$out")" \
            "$(awk '/Failed requests/ { print $3 }' <<<"$out")" \
            "$(us_per_req $(($(tree_ns "$srv_pid") - t0)) "$(awk '/Complete requests/ { print $3 }' <<<"$out")")"
    fi
}

# a hit: Cistern says so in Cache-Status. ATS's answers carry nothing
# that tells a hit without changing their size (Via is off), so ATS's rows
# are not checked; its own cache is on by default
chit='^Cache-Status:.*; hit'
ahit=''

# --- Cistern ---------------------------------------------------------------
# cistern_conf DIR PORT: a one-worker Cistern's configuration in DIR/conf
cistern_conf() {
    local d=$1 port=$2
    mkdir -p "$d/conf" "$d/cache"
    cat >"$d/conf/records.config" <<CONF
CONFIG proxy.config.http.server_ports STRING $port
CONFIG proxy.config.cistern.workers INT 1
CONFIG proxy.config.cistern.run_dir STRING $d/run
CONFIG proxy.config.log.logfile_dir STRING $d/log
CONFIG proxy.config.log.logging_enabled INT 0
CONFIG proxy.config.plugin.plugin_dir STRING $pdir
CONF
    echo "$d/cache 256M" >"$d/conf/storage.config"
    cat >"$d/conf/remap.config" <<CONF
map http://gen.test/ http://127.0.0.1/ @plugin=generator.so
map http://127.0.0.1:$port/ http://127.0.0.1/ @plugin=generator.so
map http://plain.test/ http://127.0.0.1:$port/
map http://plain2.test/ http://127.0.0.1:$port/
map http://both.test/ http://127.0.0.1:$port/ @plugin=headers.so @pparam=set-resp:X-Served-By:edge @plugin=cachekey.so @pparam=--exclude-params=utm
CONF
}
cp=$base
cistern_conf "$tmp/c" "$cp"
# --quota: a cgroup of our own for the server (v1's cpu controller, or v2)
cg=
if ((quota > 0)); then
    if [[ -d /sys/fs/cgroup/cpu && -w /sys/fs/cgroup/cpu ]]; then
        cg=/sys/fs/cgroup/cpu/cistern-bench-$$
        mkdir "$cg" && echo 100000 >"$cg/cpu.cfs_period_us" &&
            echo $((quota * 1000)) >"$cg/cpu.cfs_quota_us"
    elif [[ -f /sys/fs/cgroup/cgroup.controllers && -w /sys/fs/cgroup ]]; then
        cg=/sys/fs/cgroup/cistern-bench-$$
        mkdir "$cg" && echo "$((quota * 1000)) 100000" >"$cg/cpu.max"
    else
        echo "bench-plugins: --quota needs root and a cgroup cpu controller" >&2; exit 1
    fi
    trap 'cleanup; rmdir "$cg" 2>/dev/null || true' EXIT
    echo "# Cistern's server held to ${quota}% of one CPU ($cg)"
fi
if [[ -n $cg ]]; then
    CG=$cg "${srv_cpu[@]}" sh -c 'echo $$ >"$CG/cgroup.procs" && exec "$0" "$@"' \
        "$bin" -c "$tmp/c/conf" -f >"$tmp/c/stderr" 2>&1 &
else
    "${srv_cpu[@]}" "$bin" -c "$tmp/c/conf" -f >"$tmp/c/stderr" 2>&1 &
fi
pids+=($!)
srv_pid=$!
# one CLIENT (wrk or ab) against HOST's /cache/1024/2: "req/s cpu-us/req
# user-us/req"
measure() {
    local url="http://127.0.0.1:$cp/cache/1024/2" out t0 u0 rps n
    t0=$(tree_ns "$srv_pid")
    u0=$(tree_ticks "$srv_pid")
    if [[ $1 == wrk ]]; then
        out=$("${cli_cpu[@]}" wrk -t1 -c50 -d"$secs" -H "Host: $2" "$url")
        rps=$(awk '/Requests\/sec/ { print $2 }' <<<"$out")
        n=$(awk '/requests in/ { print $1 }' <<<"$out")
    else
        out=$("${cli_cpu[@]}" ab -q -k -c100 -t"$secs" -n 5000000 -H "Host: $2" "$url" 2>&1)
        rps=$(awk '/Requests per second/ { print $4 }' <<<"$out")
        n=$(awk '/Complete requests/ { print $3 }' <<<"$out")
    fi
    echo "$rps $(us_per_req $(($(tree_ns "$srv_pid") - t0)) "$n")" \
        "$(user_per_req $(($(tree_ticks "$srv_pid") - u0)) "$n")"
}
# load TOOL CPU PORT HOST: one client's run on CPU; prints "req/s requests"
load() {
    local url="http://127.0.0.1:$3/cache/1024/2" out
    if [[ $1 == wrk ]]; then
        out=$(taskset -c "$2" wrk -t1 -c50 -d"$secs" -H "Host: $4" "$url")
        echo "$(awk '/Requests\/sec/ { print $2 }' <<<"$out") $(awk '/requests in/ { print $1 }' <<<"$out")"
    else
        out=$(taskset -c "$2" ab -q -k -c100 -t"$secs" -n 5000000 -H "Host: $4" "$url" 2>&1)
        echo "$(awk '/Requests per second/ { print $4 }' <<<"$out") $(awk '/Complete requests/ { print $3 }' <<<"$out")"
    fi
}
if ((twin > 0)); then
    cp2=$((base + 2))
    cistern_conf "$tmp/c2" "$cp2"
    taskset -c 0 "$bin" -c "$tmp/c2/conf" -f >"$tmp/c2/stderr" 2>&1 &
    pids+=($!)
    srv2=$!
    for port in "$cp" "$cp2"; do
        for h in plain.test "$with"; do
            wait_ok "http://127.0.0.1:$port/cache/1024/2" "$h"
            curl -s -D - -o /dev/null -H "Host: $h" "http://127.0.0.1:$port/cache/1024/2" |
                grep -qiE "$chit" || { echo "bench-plugins: $h on $port is not a hit" >&2; exit 1; }
        done
    done
    echo "# $twin rounds, ${secs}s each: two servers at once (CPU 1: port $cp, CPU 0: port $cp2),"
    echo "# no plugins (plain.test) on one and $with on the other, swapped each round"
    : >"$tmp/twin"
    for ((i = 1; i <= twin; i++)); do
        h1=plain.test h2=$with
        ((i % 2 == 0)) && h1=$with h2=plain.test
        for tool in $tools; do
            a1=$(tree_ns "$srv_pid") a2=$(tree_ns "$srv2")
            load "$tool" 1 "$cp" "$h1" >"$tmp/l1" &
            l1=$!
            load "$tool" 0 "$cp2" "$h2" >"$tmp/l2" &
            wait "$l1" $!
            read -r r1 n1 <"$tmp/l1"
            read -r r2 n2 <"$tmp/l2"
            c1=$(us_per_req $(($(tree_ns "$srv_pid") - a1)) "$n1")
            c2=$(us_per_req $(($(tree_ns "$srv2") - a2)) "$n2")
            echo "$i $tool $h1 $r1 $c1 $h2 $r2 $c2" >>"$tmp/twin"
            printf 'round %2d  %-4s CPU 1 %-10s %9s req/s %7s us/req | CPU 0 %-10s %9s req/s %7s us/req\n' \
                "$i" "$tool" "$h1" "$r1" "$c1" "$h2" "$r2" "$c2"
        done
    done
    python3 - "$tmp/twin" "$with" <<'EOP'
import statistics, sys
rounds = {}
for line in open(sys.argv[1]):
    i, tool, h1, r1, c1, h2, r2, c2 = line.split()
    row = {h1: (float(r1), float(c1)), h2: (float(r2), float(c2))}
    p, b = row["plain.test"], row[sys.argv[2]]
    rounds.setdefault(tool, []).append((100 * (b[0] - p[0]) / p[0], 100 * (b[1] - p[1]) / p[1], p, b))
def spread(d):
    se = statistics.stdev(d) / len(d) ** 0.5 if len(d) > 1 else 0
    return "%+5.1f%% (mean %+5.1f%% +- %.1f)" % (statistics.median(d), statistics.mean(d), 2 * se)
for tool, name in (("wrk", "wrk -t1 -c50"), ("ab", "ab -k -c100")):
    if tool not in rounds:
        continue
    r = rounds[tool]
    pairs = [((r[k][0] + r[k + 1][0]) / 2, (r[k][1] + r[k + 1][1]) / 2) for k in range(0, len(r) - 1, 2)]
    print("%-13s no plugins %9.0f req/s %6.2f us/req | %s %9.0f req/s %6.2f us/req (medians)"
          % (name, statistics.median(x[2][0] for x in r), statistics.median(x[2][1] for x in r),
             "headers+cachekey" if sys.argv[2] == "both.test" else "the same again",
             statistics.median(x[3][0] for x in r), statistics.median(x[3][1] for x in r)))
    if pairs:
        print("%-13s %s, %d pairs of rounds: req/s %s, server cpu/req %s"
              % ("", "with plugins" if sys.argv[2] == "both.test" else "A/A", len(pairs), spread([x[0] for x in pairs]), spread([x[1] for x in pairs])))
EOP
    exit 0
fi
if ((pairs > 0)); then
    for h in plain.test "$with"; do
        wait_ok "http://127.0.0.1:$cp/cache/1024/2" "$h"
        curl -s -D - -o /dev/null -H "Host: $h" "http://127.0.0.1:$cp/cache/1024/2" |
            grep -qiE "$chit" || { echo "bench-plugins: $h is not a hit" >&2; exit 1; }
    done
    echo "# $pairs pairs, ${secs}s each: no plugins (plain.test) vs $with"
    : >"$tmp/pairs"
    for ((i = 1; i <= pairs; i++)); do
        order="plain.test $with"
        ((i % 2 == 0)) && order="$with plain.test"
        for tool in $tools; do
            for h in $order; do
                r=$(measure "$tool" "$h")
                echo "$tool $h $r" >>"$tmp/pairs"
                printf 'round %2d  %-4s %-11s %10s req/s  cpu %6s us/req (user %s)\n' \
                    "$i" "$tool" "$h" $r
            done
        done
    done
    python3 - "$tmp/pairs" "$with" <<'EOP'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    tool, host, rps, cpu, user = line.split()
    rows.setdefault((tool, host), []).append((float(rps), float(cpu), float(user)))
def spread(d):     # the median of the rounds' differences, and their mean +- 2 s.e.
    se = statistics.stdev(d) / len(d) ** 0.5 if len(d) > 1 else 0
    return "%+5.1f%% (mean %+5.1f%% +- %.1f)" % (statistics.median(d), statistics.mean(d), 2 * se)
for tool, name in (("wrk", "wrk -t1 -c50"), ("ab", "ab -k -c100")):
    if (tool, "plain.test") not in rows:
        continue
    a, b = rows[(tool, "plain.test")], rows[(tool, sys.argv[2])]
    ra, rb = statistics.median(x[0] for x in a), statistics.median(x[0] for x in b)
    ca, cb = statistics.median(x[1] for x in a), statistics.median(x[1] for x in b)
    print("%-13s no plugins %9.0f req/s %6.2f us/req | %s %9.0f req/s "
          "%6.2f us/req (medians)" % (name, ra, ca, "headers+cachekey" if sys.argv[2] ==
                                      "both.test" else "the same again", rb, cb))
    print("%-13s %s, round by round: req/s %s, cpu/req %s, user cpu/req %+.3f us"
          % ("", "with plugins" if sys.argv[2] == "both.test" else "A/A", spread([100 * (y[0] - x[0]) / x[0] for x, y in zip(a, b)]),
             spread([100 * (y[1] - x[1]) / x[1] for x, y in zip(a, b)]),
             statistics.median(y[2] - x[2] for x, y in zip(a, b))))
EOP
    exit 0
fi
echo "# wrk -t1, ${secs}s, a 1 KiB cached object (cistern: $bin)"
run "cistern generator hit (-c1)" "$cp" gen.test /cache/1024/1 1 "$chit"
run "cistern plain map hit (-c1)" "$cp" plain.test /cache/1024/1 1 "$chit"
run "cistern no plugins (-c50)" "$cp" plain.test /cache/1024/2 50 "$chit"
run "cistern headers+cachekey (-c50)" "$cp" both.test /cache/1024/2 50 "$chit"

# --- ATS -------------------------------------------------------------------
if ((ats)) && command -v traffic_server >/dev/null && [[ -f /usr/lib/trafficserver/modules/generator.so ]]; then
    ap=$((base + 1)) d=$tmp/ats
    cst_ats_runroot "$d"
    cat >"$d/etc/records.config" <<CONF
CONFIG proxy.config.http.server_ports STRING $ap
CONFIG proxy.config.exec_thread.autoconfig INT 0
CONFIG proxy.config.exec_thread.limit INT 1
CONFIG proxy.config.accept_threads INT 0
CONFIG proxy.config.task_threads INT 1
CONFIG proxy.config.cache.threads_per_disk INT 1
CONFIG proxy.config.log.logging_enabled INT 0
CONFIG proxy.config.url_remap.remap_required INT 1
CONFIG proxy.config.admin.user_id STRING #-1
CONFIG proxy.config.cache.ram_cache.size INT 268435456
CONFIG proxy.config.diags.debug.enabled INT 0
CONFIG proxy.config.http.insert_response_via_str INT 0
CONFIG proxy.config.http.cache.required_headers INT 0
CONFIG proxy.config.plugin.plugin_dir STRING /usr/lib/trafficserver/modules
CONF
    echo "cond %{SEND_RESPONSE_HDR_HOOK}" >"$d/etc/hdr.conf"
    echo "    set-header X-Served-By edge" >>"$d/etc/hdr.conf"
    echo "$d/cache 256M" >"$d/etc/storage.config"
    # plain.test and both.test: ATS caches objects from an origin of its
    # own (Cistern's generator rule above); mapping them to ATS's own port
    # is refused by ATS as a loop
    cat >"$d/etc/remap.config" <<CONF
map http://gen.test/ http://127.0.0.1/ @plugin=generator.so
map http://127.0.0.1:$ap/ http://127.0.0.1/ @plugin=generator.so
map http://plain.test/ http://127.0.0.1:$cp/
map http://both.test/ http://127.0.0.1:$cp/ @plugin=header_rewrite.so @pparam=$d/etc/hdr.conf @plugin=cachekey.so @pparam=--exclude-params=utm
CONF
    printf 'ip_allow:\n  - apply: in\n    ip_addrs: 0/0\n    action: allow\n    methods: ALL\n' >"$d/etc/ip_allow.yaml"
    echo "logging: {}" >"$d/etc/logging.yaml"
    (cd "$d" && exec "${srv_cpu[@]}" traffic_server --run-root="$d/runroot.yaml" >"$d/stderr.log" 2>&1) &
    pids+=($!)
    srv_pid=$!
    run "ats generator hit (-c1)" "$ap" gen.test /cache/1024/1 1 "$ahit"
    run "ats plain map hit (-c1)" "$ap" plain.test /cache/1024/1 1 "$ahit"
    run "ats no plugins (-c50)" "$ap" plain.test /cache/1024/2 50 "$ahit"
    run "ats header_rewrite+cachekey (-c50)" "$ap" both.test /cache/1024/2 50 "$ahit"
else
    echo "# ATS: skipped (traffic_server or its generator.so not installed, or --no-ats)"
fi
