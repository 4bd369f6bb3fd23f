#!/usr/bin/env bash
# scripts/readme-keys.sh: README.md's list of records.config keys, made by
# the daemon from its own key tables (`cistern --list-keys`, conf/records.c
# and conf/atskeys.c), so the documentation cannot drift from the code.
#
#   scripts/readme-keys.sh [--check] [CISTERN]
#
# Replaces the lines between "<!-- keys:begin -->" and "<!-- keys:end -->"
# in README.md with the output of `CISTERN --list-keys`.  CISTERN is the
# built daemon: the argument, else $CISTERN_BIN, else ./cistern or
# _build/plain/cistern in the source tree.  With --check nothing is written:
# exit status 1 (and a diff) when README.md differs from what the daemon
# prints, 0 when it is current, 2 on a usage error or a missing daemon.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readme=$top/README.md
check=0
bin=${CISTERN_BIN:-}

while (($#)); do
    case $1 in
    --check) check=1 ;;
    -h | --help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "usage: scripts/readme-keys.sh [--check] [CISTERN]" >&2; exit 2 ;;
    *) bin=$1 ;;
    esac
    shift
done
if [[ -z $bin ]]; then
    for b in "$top/cistern" "$top/_build/plain/cistern"; do
        if [[ -x $b ]]; then bin=$b; break; fi
    done
fi
if [[ -z $bin || ! -x $bin ]]; then
    echo "readme-keys.sh: no cistern binary (give it as an argument or CISTERN_BIN)" >&2
    exit 2
fi
if [[ $(grep -c '^<!-- keys:begin -->$' "$readme") != 1 || $(grep -c '^<!-- keys:end -->$' "$readme") != 1 ]]; then
    echo "readme-keys.sh: README.md needs one <!-- keys:begin --> and one <!-- keys:end --> line" >&2
    exit 2
fi

keys=$(mktemp)
new=$(mktemp)
trap 'rm -f "$keys" "$new"' EXIT
"$bin" --list-keys > "$keys"
awk -v keys="$keys" '
    /^<!-- keys:begin -->$/ { print; while ((getline l < keys) > 0) print l; skip = 1; next }
    /^<!-- keys:end -->$/   { skip = 0 }
    !skip                   { print }
' "$readme" > "$new"

if ((check)); then
    if ! diff -u "$readme" "$new"; then
        echo "readme-keys.sh: README.md's key list differs from \`cistern --list-keys\`; run scripts/readme-keys.sh" >&2
        exit 1
    fi
    exit 0
fi
if cmp -s "$readme" "$new"; then
    echo "README.md: key list already current"
else
    cat "$new" > "$readme"
    echo "README.md: key list rewritten"
fi
