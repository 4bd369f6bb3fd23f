#!/usr/bin/env bash
# scripts/fnlen.sh: no C function of the project is longer than 120 lines.
#
#   scripts/fnlen.sh [--max N] [--check] [--top K] [PATH...]
#
# Reads every C source and header under PATH (default: every folder of the
# project that holds C: conf shm cache worker master t scripts) with
# universal-ctags (Debian package universal-ctags), which gives each
# function's first and last line (the line of its name to its closing
# brace).  Check's START_TEST(name) ... END_TEST bodies count as
# functions too.  Prints every function longer than N lines (default 120),
# longest first, as "lines  file:line  name"; with --top K also the K
# longest overall.  Exit status 1 when there is an offender (with or without
# --check, which exists so that callers read alike), 0 otherwise, 2 on a
# usage error.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
max=120
topk=0
declare -a paths=()

while (($#)); do
    case $1 in
    --max) max=$2; shift ;;
    --top) topk=$2; shift ;;
    --check) ;;
    -h | --help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "usage: scripts/fnlen.sh [--max N] [--check] [--top K] [PATH...]" >&2; exit 2 ;;
    *) paths+=("$1") ;;
    esac
    shift
done
[[ $max =~ ^[0-9]+$ && $topk =~ ^[0-9]+$ ]] || { echo "fnlen.sh: --max and --top take a number" >&2; exit 2; }
command -v ctags >/dev/null || { echo "fnlen.sh: ctags not found (apt-get install universal-ctags)" >&2; exit 2; }
cd "$top"
((${#paths[@]})) || paths=(conf shm cache worker master t scripts)

tags=$(mktemp)
trap 'rm -f "$tags"' EXIT
ctags --languages=C --langmap=C:.c.h --kinds-C=f --fields=+ne -o "$tags" -R "${paths[@]}"

FN_MAX=$max FN_TOP=$topk FN_TAGS=$tags python3 - "${paths[@]}" <<'PY'
import os, re, sys

mx, topk = int(os.environ["FN_MAX"]), int(os.environ["FN_TOP"])
funcs = []      # (lines, file, line, name)
with open(os.environ["FN_TAGS"]) as f:
    for t in f:
        if t.startswith("!"):
            continue
        parts = t.rstrip("\n").split("\t")
        fields = dict(p.split(":", 1) for p in parts[3:] if ":" in p)
        if "line" in fields and "end" in fields:
            a, b = int(fields["line"]), int(fields["end"])
            funcs.append((b - a + 1, parts[1], a, parts[0]))

# Check's test bodies: START_TEST(name) ... END_TEST (ctags sees a macro).
start = re.compile(r'^\s*START_TEST\s*\(\s*(\w+)\s*\)')
files = []
for p in sys.argv[1:]:
    if os.path.isfile(p):
        files.append(p)
    for d, _, fs in os.walk(p):
        files += [os.path.join(d, x) for x in fs if x.endswith(".c")]
for path in sorted(set(files)):
    name, first = None, 0
    for n, line in enumerate(open(path, errors="replace"), 1):
        m = start.match(line)
        if m:
            name, first = m.group(1), n
        elif name and line.strip() == "END_TEST":
            funcs.append((n - first + 1, path, first, name))
            name = None

funcs.sort(key=lambda x: (-x[0], x[1], x[2]))
bad = [f for f in funcs if f[0] > mx]
print("# %d functions read; %d longer than %d lines" % (len(funcs), len(bad), mx))
for n, path, line, name in bad:
    print("%5d  %s:%d  %s" % (n, path, line, name))
if topk:
    print("# the %d longest" % topk)
    for n, path, line, name in funcs[:topk]:
        print("%5d  %s:%d  %s" % (n, path, line, name))
sys.exit(1 if bad else 0)
PY
