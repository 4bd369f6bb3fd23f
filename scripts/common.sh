# shellcheck shell=bash
# scripts/common.sh: helpers shared by test.sh, quickstart.sh, bench.sh and
# .ci/run.  Sourced, never run.  Defines:
#   CST_TOP            the source tree (absolute)
#   CST_DEB_PACKAGES   every Debian package the build and the tests need
#   cst_say MSG...     a progress line on stderr
#   cst_die MSG...     an error line on stderr, exit 1
#   cst_ensure_packages PKG...   install the missing ones (root) or die
#   cst_autogen        run ./autogen.sh when configure is missing or stale
#   cst_configure DIR [ARGS...]  out-of-tree configure into DIR, reused when
#                      the arguments and ./configure are unchanged
#   cst_make DIR [TARGET...]     make -j$(nproc) in DIR
#   cst_callgrind_start BIN DIR WORKERS LOGGING ORIGIN   a daemon under
#                      callgrind, for scripts/profile.sh and bench-scaling.sh
#   cst_ats_runroot DIR   a private ATS runroot in DIR (bench.sh,
#                      bench-plugins.sh)

CST_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Build: compiler, autotools, the libraries configure looks for.  Tests:
# Check, python3 (end-to-end harness), curl/ab/wrk (clients), procps (ps,
# pgrep), openssl, valgrind.  rsync/xz-utils are not needed: distcheck makes
# a .tar.gz.
# shellcheck disable=SC2034 # used by the scripts that source this file
CST_DEB_PACKAGES=(
    build-essential autoconf automake libtool pkg-config
    libssl-dev libhttp-parser-dev liblmdb-dev libevent-dev libyaml-dev check
    python3 curl apache2-utils wrk procps ca-certificates openssl valgrind
    iproute2 strace shellcheck clang libclang-rt-14-dev universal-ctags
    netcat-openbsd prometheus tmux libnghttp2-dev nghttp2-client python3-h2
)

cst_say() { printf '==> %s\n' "$*" >&2; }
cst_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# The packages among "$@" that are not installed (dpkg's view).
cst_missing_packages() {
    local p st
    for p in "$@"; do
        st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
        [[ $st == installed ]] || printf '%s\n' "$p"
    done
}

# Install whichever of "$@" are missing.  As root: apt-get update (only when
# something is missing) and apt-get install.  Not root: list them and fail.
# Not Debian (no dpkg-query): say so and go on; configure will name what is
# missing.
cst_ensure_packages() {
    local missing
    if ! command -v dpkg-query >/dev/null 2>&1; then
        cst_say "not a Debian system: not checking packages ($*)"
        return 0
    fi
    mapfile -t missing < <(cst_missing_packages "$@")
    ((${#missing[@]} == 0)) && return 0
    if ((EUID != 0)); then
        cst_die "missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})"
    fi
    cst_say "installing missing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
}

# Regenerate the build system when configure is missing or older than its
# inputs.  (Once configured, make itself re-runs autoconf/automake/config.status
# when configure.ac or Makefile.am change; this covers the very first run.)
cst_autogen() {
    local f stale=0
    [[ -x $CST_TOP/configure ]] || stale=1
    for f in configure.ac Makefile.am; do
        [[ $CST_TOP/$f -nt $CST_TOP/configure ]] && stale=1
    done
    if ((stale)); then
        cst_say "running ./autogen.sh"
        (cd "$CST_TOP" && ./autogen.sh)
    fi
    if [[ -f $CST_TOP/config.status ]]; then
        cst_die "the source tree is configured in place ($CST_TOP/config.status); out-of-tree builds need a clean tree: run 'make distclean' there first"
    fi
}

# cst_configure DIR [CONFIGURE-ARGS...]: configure the tree into DIR (out of
# tree).  Reuses DIR when it was configured with the same arguments by the
# same ./configure; otherwise (re)configures.
cst_configure() {
    local dir=$1 stamp want have=''
    shift
    mkdir -p "$dir"
    stamp=$dir/.cst-configure-args
    want="$*"
    [[ -f $stamp ]] && have=$(<"$stamp")
    if [[ -f $dir/config.status && -f $dir/Makefile && $have == "$want" &&
          ! $CST_TOP/configure -nt $dir/config.status ]]; then
        return 0
    fi
    cst_say "configuring $dir: ./configure $want"
    rm -f "$stamp"
    (cd "$dir" && "$CST_TOP/configure" "$@")
    printf '%s' "$want" >"$stamp"
}

# cst_make DIR [TARGET...]
cst_make() {
    local dir=$1
    shift
    (cd "$dir" && make -j"$(nproc)" "$@")
}

# cst_callgrind_start BIN DIR WORKERS LOGGING ORIGIN: run the daemon BIN
# under valgrind's callgrind (one count file per process, DIR/cg.PID) with
# a configuration in DIR: WORKERS workers, logging_enabled LOGGING, PUSH
# on, a 64M cache, http://m.test/ mapped to ORIGIN (host:port).  Returns
# once every child is ready; the master's pid is in DIR/run/cistern.pid,
# its port in DIR/run/ports.  CST_LOGGING_YAML: a logging.yaml to add;
# CST_REMAP_OPTS: options after the map line (e.g. @plugin=...), with
# CST_PLUGIN_DIR as proxy.config.plugin.plugin_dir; CST_CALLGRIND_OPTS:
# more valgrind options.
cst_callgrind_start() {
    local bin=$1 d=$2 workers=$3 logging=$4 origin=$5
    mkdir -p "$d"
    cat >"$d/records.config" <<EOF
CONFIG proxy.config.http.server_ports STRING 0
CONFIG proxy.config.cistern.run_dir STRING run
CONFIG proxy.config.log.logfile_dir STRING log
CONFIG proxy.config.cistern.workers INT $workers
CONFIG proxy.config.admin.user_id STRING #-1
CONFIG proxy.config.log.logging_enabled INT $logging
CONFIG proxy.config.http.push_method_enabled INT 1
EOF
    if [ -n "${CST_PLUGIN_DIR:-}" ]; then
        echo "CONFIG proxy.config.plugin.plugin_dir STRING $CST_PLUGIN_DIR" >>"$d/records.config"
    fi
    echo "cache 64M" >"$d/storage.config"
    echo "map http://m.test/ http://$origin/ ${CST_REMAP_OPTS:-}" >"$d/remap.config"
    # CST_LOGGING_YAML names a logging.yaml to profile with (custom logs)
    if [ -n "${CST_LOGGING_YAML:-}" ]; then cp "$CST_LOGGING_YAML" "$d/logging.yaml"; fi
    # CST_CALLGRIND_OPTS: more callgrind options (profile.sh --cache's
    # --cache-sim=yes)
    # shellcheck disable=SC2086
    valgrind -q --tool=callgrind --trace-children=yes ${CST_CALLGRIND_OPTS:-} \
        --callgrind-out-file="$d/cg.%p" "$bin" -c "$d" -f >"$d/out" 2>&1 &
    for _ in $(seq 120); do [ -s "$d/run/ports" ] && break; sleep 0.5; done
    sleep 3     # every child ready under valgrind
}

# cst_ats_runroot DIR: a private runroot for traffic_server (run alone,
# --run-root=DIR/runroot.yaml): DIR/{etc,var,run,log,cache}, Debian's body
# factory copied, the configuration files ATS insists on present and
# empty, and DIR/runroot.yaml pointing every directory into DIR (the
# binaries and modules stay Debian's).  records.config, storage.config,
# remap.config, ip_allow.yaml and logging.yaml are the caller's.
cst_ats_runroot() {
    local dir=$1 f
    mkdir -p "$dir/etc" "$dir/var" "$dir/run" "$dir/log" "$dir/cache"
    [[ -d /etc/trafficserver/body_factory ]] && cp -r /etc/trafficserver/body_factory "$dir/etc/"
    for f in plugin.config hosting.config volume.config cache.config parent.config \
        socks.config splitdns.config ssl_multicert.config sni.yaml strategies.yaml; do
        : >"$dir/etc/$f"
    done
    cat >"$dir/runroot.yaml" <<CONF
prefix: $dir
exec_prefix: /usr
bindir: /usr/bin
sbindir: /usr/sbin
sysconfdir: $dir/etc
datadir: $dir/var
includedir: /usr/include
libdir: /usr/lib/trafficserver
libexecdir: /usr/lib/trafficserver/modules
localstatedir: $dir/var
runtimedir: $dir/run
logdir: $dir/log
cachedir: $dir/cache
CONF
}
