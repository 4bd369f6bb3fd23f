#!/usr/bin/env bash
# scripts/callgraph.sh: the file-level call graph of a folder, its cycles,
# and the include layering of the whole tree, read from the code with
# universal-ctags (Debian package universal-ctags).
#
#   scripts/callgraph.sh [--check] [--allow 'a.c->b.c']... [--allow-file F]
#                        [--quiet] [FOLDER]        (default: worker/)
#
# What it prints:
#   1. every edge "a.c -> b.c  N": file a.c names N times (calls, or takes
#      the address of) functions that ctags finds defined in b.c.  A
#      function defined static inline in x.h counts as x.c's when there is
#      one (the header is that module's).  A name defined in the calling
#      file itself is a local call, whatever other files define it.
#   2. the two-way pairs, and every cycle: each strongly connected component
#      of more than one file, first of the whole graph, then once the
#      allowed edges are taken out.
#   3. the include layering across folders, bottom to top
#          conf < shm < cache < worker < master
#      a file in folder X may include only headers of X or of folders
#      below it; every upward include is listed.
#
# Allowed edges (documented upcalls): the ALLOWED list below, the file
# scripts/callgraph.allow (one "a.c->b.c" a line, '#' comments), and
# --allow (repeatable).  With --check the exit status is 1 when a cycle
# remains after removing them or an include goes upward, else 0.
#
# Function length (at most 120 lines) is scripts/fnlen.sh's job.
set -euo pipefail

# Edges documented as allowed upcalls, "caller.c->callee.c".  Empty until
# the refactor of issue 17 lands; each entry says why in DESIGN.md.
ALLOWED=(
)

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
check=0
quiet=0
folder=worker
allow_file=$top/scripts/callgraph.allow
declare -a allow=("${ALLOWED[@]}")

usage() { sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while (($#)); do
    case $1 in
    --check) check=1 ;;
    --quiet) quiet=1 ;;
    --allow) allow+=("$2"); shift ;;
    --allow=*) allow+=("${1#--allow=}") ;;
    --allow-file) allow_file=$2; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
    *) folder=${1%/} ;;
    esac
    shift
done

command -v ctags >/dev/null || { echo "callgraph.sh: ctags not found (apt-get install universal-ctags)" >&2; exit 2; }
ctags --version 2>/dev/null | grep -q 'Universal Ctags' ||
    { echo "callgraph.sh: needs Universal Ctags (apt-get install universal-ctags)" >&2; exit 2; }
cd "$top"
[[ -d $folder ]] || { echo "callgraph.sh: no folder $folder" >&2; exit 2; }
if [[ -f $allow_file ]]; then
    while IFS= read -r line; do
        line=${line%%#*}
        line=${line//[[:space:]]/}
        [[ -n $line ]] && allow+=("$line")
    done <"$allow_file"
fi

tags=$(mktemp)
trap 'rm -f "$tags"' EXIT
# every function definition of the layered folders, with its file
ctags --languages=C --kinds-C=f --fields=+n -o "$tags" -R conf shm cache worker master

CG_FOLDER=$folder CG_CHECK=$check CG_QUIET=$quiet CG_TAGS=$tags \
    python3 - "${allow[@]+"${allow[@]}"}" <<'PY'
import os, re, sys
from collections import defaultdict

folder = os.environ["CG_FOLDER"]
check = os.environ["CG_CHECK"] == "1"
quiet = os.environ["CG_QUIET"] == "1"
allowed = set()
for a in sys.argv[1:]:
    a = a.replace(" ", "")
    if "->" not in a:
        sys.exit("callgraph.sh: --allow wants 'a.c->b.c', not %r" % a)
    x, y = a.split("->", 1)
    allowed.add((os.path.basename(x), os.path.basename(y)))

# name -> set of defining files (as module .c names), per folder
defs = defaultdict(set)
with open(os.environ["CG_TAGS"]) as f:
    for line in f:
        if line.startswith("!"):
            continue
        name, path = line.split("\t")[:2]
        if os.path.dirname(path) != folder:
            continue
        base = os.path.basename(path)
        if base.endswith(".h") and os.path.exists(path[:-2] + ".c"):
            base = base[:-2] + ".c"
        defs[name].add(base)

# Strip comments, strings and character constants (keeping line count).
tok = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
def strip(src):
    return tok.sub(lambda m: "\n" * m.group(0).count("\n"), src)

ident = re.compile(r'\b[A-Za-z_][A-Za-z0-9_]*\b')
files = sorted(p for p in os.listdir(folder) if p.endswith(".c"))
edges = defaultdict(int)
names = defaultdict(lambda: defaultdict(int))
for fn in files:
    src = strip(open(os.path.join(folder, fn), errors="replace").read())
    for m in ident.finditer(src):
        d = defs.get(m.group(0))
        if not d or fn in d:
            continue            # unknown, or defined here: a local call
        for callee in d:
            edges[(fn, callee)] += 1
            names[(fn, callee)][m.group(0)] += 1

def sccs(nodes, es):
    """Tarjan's strongly connected components."""
    adj = defaultdict(list)
    for (a, b) in es:
        adj[a].append(b)
    index, low, on, stack, out, n = {}, {}, set(), [], [], [0]
    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1
        stack.append(v); on.add(v)
        for w in adj[v]:
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            c = []
            while True:
                w = stack.pop(); on.discard(w); c.append(w)
                if w == v:
                    break
            out.append(sorted(c))
    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return [c for c in out if len(c) > 1]

nodes = set(files)
print("# call graph of %s/ (%d files, %d edges): caller -> callee  references" %
      (folder, len(files), len(edges)))
if not quiet:
    for (a, b), c in sorted(edges.items()):
        top = sorted(names[(a, b)].items(), key=lambda kv: (-kv[1], kv[0]))[:4]
        print("  %-10s -> %-10s %4d   %s%s" % (a, b, c, ", ".join(k for k, _ in top),
                                               ", ..." if len(names[(a, b)]) > 4 else ""))
pairs = sorted((a, b) for (a, b) in edges if a < b and (b, a) in edges)
print("# two-way pairs: %d" % len(pairs))
for a, b in pairs:
    print("  %s <-> %s  (%d / %d)" % (a, b, edges[(a, b)], edges[(b, a)]))

def show_cycles(title, es):
    cs = sccs(nodes, es)
    print("# %s: %d" % (title, len(cs)))
    for c in cs:
        inner = sorted((a, b) for (a, b) in es if a in c and b in c)
        print("  cycle of %d files: %s" % (len(c), " ".join(c)))
        print("    edges: %s" % ", ".join("%s->%s" % e for e in inner))
    return cs

show_cycles("cycles (strongly connected components of more than one file)", edges)
unused = sorted(allowed - set(edges))
if allowed:
    print("# allowed edges: %s" % ", ".join("%s->%s" % e for e in sorted(allowed)))
for a, b in unused:
    print("  note: allowed edge %s->%s does not occur" % (a, b))
left = show_cycles("cycles once the allowed edges are removed",
                   {e: c for e, c in edges.items() if e not in allowed})

# Include layering across folders.
rank = {"conf": 0, "shm": 1, "cache": 2, "worker": 3, "master": 4}
inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
bad = []
for d in rank:
    for p in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if not p.endswith((".c", ".h")):
            continue
        for m in inc.finditer(open(os.path.join(d, p), errors="replace").read()):
            tgt = m.group(1).split("/")[0]
            if tgt in rank and rank[tgt] > rank[d]:
                bad.append("%s/%s includes %s" % (d, p, m.group(1)))
print("# upward includes (order conf < shm < cache < worker < master): %d" % len(bad))
for b in bad:
    print("  " + b)

if check and (left or bad):
    print("callgraph.sh --check: FAIL (%d cycle(s), %d upward include(s))" % (len(left), len(bad)))
    sys.exit(1)
if check:
    print("callgraph.sh --check: ok")
PY
