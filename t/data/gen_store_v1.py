#!/usr/bin/env python3
"""Write t/data/store-v1.tar.gz: a cache store written by the release
before objects spanned segments (layout version 1, commit 2465dbf), for
test_large.py's upgrade test.  Kept so the image can be made again:

    git worktree add /tmp/old 2465dbf && cd /tmp/old && ./autogen.sh &&
      mkdir _b && cd _b && ../configure -q && make -j2 cistern
    CISTERN_BIN=/tmp/old/_b/cistern CISTERN_SRCDIR=$PWD \\
      python3 -B t/data/gen_store_v1.py t/data/store-v1.tar.gz

The tarball holds `store/` (content + index/, a 16M store: 14 segments of
1 MiB) and `manifest.json`: the origin port the objects were keyed under
(the cache key is the mapped URL, port included) and each object's path,
body seed and size.  Bodies are harness.seeded(name, size); every object
is fresh for ten years.  One object was refreshed by a 304 (a HEADERS
record linking to its OBJECT record), one is stored under Vary (a marker
and a variant), one came chunked.
"""

import io
import json
import os
import sys
import shutil
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import harness  # noqa: E402
from harness import Cistern, Origin, seeded  # noqa: E402

HOST = "c.test"
LONG = "max-age%3D315360000"
OBJECTS = [  # name, size, chunked
    ("v1-empty", 0, False), ("v1-one", 1, False), ("v1-small", 5000, False),
    ("v1-chunked", 70000, True), ("v1-mid", 200000, False),
    ("v1-big", 600000, False),
]


def get(port, path, headers=()):
    r = harness.one_request(port, "GET", path, None, headers, HOST, None, 20,
                            close_delimited_ok=False)
    assert r is not None and r.status == 200, (path, r)
    return r


def main(out):
    tmp = tempfile.mkdtemp(prefix="cistern-v1-")
    store = os.path.join(tmp, "store")
    os.mkdir(store)
    os.chmod(tmp, 0o755)
    with Origin() as o:
        with Cistern(storage=["%s 16M" % store], workers=1,
                     remap=["map http://%s/ http://%s/" % (HOST, o.authority)]) as c:
            man = {"origin_port": int(o.authority.rsplit(":", 1)[1]),
                   "objects": []}
            for name, n, chunked in OBJECTS:
                p = "/seed/%s/%s/%d/headers?Cache-Control=%s" % (
                    name, "chunked" if chunked else "bytes", n, LONG)
                for _ in range(2):
                    r = get(c.port, p)
                assert harness.is_hit(r) and r.body == seeded(name, n), name
                man["objects"].append({"path": p, "seed": name, "size": n})
            # refreshed by a 304: stale after 1 s, then fresh for 10 years
            body = seeded("v1-refreshed", 30000)
            o.script("/refreshed", [
                {"status": 200, "body": body,
                 "headers": [["ETag", '"r1"'], ["Cache-Control", "max-age=1"]]},
                {"status": 304, "headers": [["ETag", '"r1"'],
                                            ["Cache-Control", "max-age=315360000"]]}])
            get(c.port, "/refreshed")
            time.sleep(2.2)
            get(c.port, "/refreshed")
            r = get(c.port, "/refreshed")
            assert harness.is_hit(r) and r.body == body, r.header("Cache-Status")
            man["objects"].append({"path": "/refreshed", "seed": "v1-refreshed",
                                   "size": 30000})
            # Vary
            p = "/seed/v1-vary/bytes/40000/headers?Cache-Control=%s&Vary=Accept-Language" % LONG
            for _ in range(2):
                r = get(c.port, p, [("Accept-Language", "fr")])
            assert harness.is_hit(r), r.header("Cache-Status")
            man["objects"].append({"path": p, "seed": "v1-vary", "size": 40000,
                                   "headers": [["Accept-Language", "fr"]]})
            c.stop()
        buf = json.dumps(man, indent=1).encode()
        with tarfile.open(out, "w:gz", compresslevel=9) as t:
            t.add(store, arcname="store")
            ti = tarfile.TarInfo("manifest.json")
            ti.size = len(buf)
            ti.mtime = int(time.time())
            t.addfile(ti, io.BytesIO(buf))
    shutil.rmtree(tmp)
    print("wrote %s (%d bytes)" % (out, os.path.getsize(out)))


if __name__ == "__main__":
    main(sys.argv[1])
