#!/usr/bin/env python3
"""End-to-end tests of the shared cache store (issue 5).

Every test runs a private daemon with storage.config and a real origin
(t/origin.py).  Bodies come from the origin's `seed/S` directive: each URL
gets its own deterministic bytes (harness.seeded(S, N)), so a hit can be
checked byte for byte and a body served for the wrong URL, or spliced from
two objects, cannot pass.  X-Origin-Seq and the origin's request log tell a
hit from a fetch.
"""

import os
import random
import re
import threading
import time
import urllib.parse
from email.utils import formatdate

import harness
from harness import (Cistern, Collector, Origin, cache_stats, expect,
                     expect_body, expect_eq, is_hit, seeded)

HOST = "c.test"
CC60 = "headers?Cache-Control=max-age%3D60"


def remap_for(o):
    return ["map http://%s/ http://%s/" % (HOST, o.authority)]


def records(**kw):
    r = {}
    for k, v in kw.items():
        r[k.replace("__", ".")] = v
    return r


def fetch(port, path, method="GET", headers=(), body=None, host=HOST,
          src=None, timeout=20.0):
    """harness.one_request; None also for a close-delimited body (an origin
    that died mid-body would look complete)."""
    return harness.one_request(port, method, path, body, headers, host, src,
                               timeout, close_delimited_ok=False)


def get_ok(port, path, **kw):
    r = fetch(port, path, **kw)
    expect(r is not None, "GET %s: no complete response" % path)
    return r


def seeded_path(name, n, extra=CC60, chunked=False):
    kind = "chunked" if chunked else "bytes"
    return "/seed/%s/%s/%d/%s" % (name, kind, n, extra)


def origin_hits(o, path):
    """Origin requests whose target is path."""
    return [q for q in o.requests() if q["target"] == path]


# ---------------------------------------------------------------------------

def test_miss_then_hit():
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                workers=1) as c:
        path = seeded_path("mth", 50000)
        want = seeded("mth", 50000)
        r1 = get_ok(c.port, path)
        expect_eq(r1.status, 200, "first status")
        expect_body(r1.body, want, "first body")
        cs = r1.header("Cache-Status", "")
        expect("fwd=uri-miss" in cs and "stored" in cs,
               "first Cache-Status %r: want fwd=uri-miss ... stored" % cs)
        r2 = get_ok(c.port, path)
        expect(is_hit(r2), "second Cache-Status %r: want hit"
               % r2.header("Cache-Status"))
        expect_body(r2.body, want, "hit body")
        expect_eq(r2.header("Content-Length"), "50000", "hit Content-Length")
        expect_eq(r2.header("X-Origin-Seq"), r1.header("X-Origin-Seq"),
                  "X-Origin-Seq (stored header)")
        age = r2.header("Age")
        expect(age is not None and 0 <= int(age) <= 1, "hit Age %r" % age)
        m = re.search(r"ttl=(\d+)", r2.header("Cache-Status"))
        expect(m and 58 <= int(m.group(1)) <= 60,
               "ttl in %r" % r2.header("Cache-Status"))
        time.sleep(2.1)
        r3 = get_ok(c.port, path)
        expect(is_hit(r3), "third: want hit, got %r"
               % r3.header("Cache-Status"))
        expect(int(r3.header("Age", "-1")) >= 2,
               "Age after 2.1 s: %r" % r3.header("Age"))
        m = re.search(r"ttl=(\d+)", r3.header("Cache-Status"))
        expect(m and int(m.group(1)) <= 58,
               "ttl after 2.1 s in %r" % r3.header("Cache-Status"))
        expect_body(r3.body, want, "third body")
        expect_eq(len(origin_hits(o, path)), 1, "origin requests")


def _twice_goes_to_origin(c, o, path, method="GET", headers=(), body=None,
                          then_get=False):
    r1 = get_ok(c.port, path, method=method, headers=headers, body=body)
    r2 = get_ok(c.port, path, headers=headers) if then_get else \
        get_ok(c.port, path, method=method, headers=headers, body=body)
    expect(not is_hit(r2), "second response is a hit (%r): should not "
           "have been stored" % r2.header("Cache-Status"))
    expect_eq(len(origin_hits(o, path)), 2, "origin requests for %s" % path)
    expect(r2.header("X-Origin-Seq") != r1.header("X-Origin-Seq"),
           "same X-Origin-Seq twice")
    return r1, r2


def test_not_stored():
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                workers=1) as c, Collector() as col:
        with col.case("no-store"):
            _twice_goes_to_origin(
                c, o, "/ns/bytes/100/headers?Cache-Control=no-store%2C"
                "%20max-age%3D60")
        with col.case("private"):
            _twice_goes_to_origin(
                c, o, "/pv/bytes/100/headers?Cache-Control=private%2C"
                "%20max-age%3D60")
        with col.case("Authorization without public/s-maxage"):
            _twice_goes_to_origin(c, o, "/au/bytes/100/" + CC60,
                                  headers=[("Authorization", "Basic eDp5")])
        with col.case("POST"):
            _twice_goes_to_origin(c, o, "/po/bytes/100/" + CC60,
                                  method="POST", body=b"x=1")
        with col.case("POST then GET"):
            _twice_goes_to_origin(c, o, "/pg/bytes/100/" + CC60,
                                  method="POST", body=b"x=1", then_get=True)
        with col.case("500 without explicit freshness"):
            _twice_goes_to_origin(c, o, "/s5/status/500/bytes/100")
        with col.case("500 with Last-Modified only"):
            _twice_goes_to_origin(c, o, "/s5l/status/500/bytes/100/"
                                  "last-modified/1000000000")
        with col.case("max-age=0"):
            _twice_goes_to_origin(
                c, o, "/m0/bytes/100/headers?Cache-Control=max-age%3D0")
        with col.case("no freshness at all (required_headers 1)"):
            _twice_goes_to_origin(c, o, "/nf/bytes/100")
        with col.case("Expires in the past"):
            _twice_goes_to_origin(
                c, o, "/ep/bytes/100/headers?Expires="
                + urllib.parse.quote(formatdate(time.time() - 3600,
                                                usegmt=True)))
        # Positive controls: the same shapes that ARE storable.
        with col.case("Authorization with public (control)"):
            p = "/aup/bytes/100/headers?Cache-Control=public%2C%20max-age%3D60"
            get_ok(c.port, p, headers=[("Authorization", "Basic eDp5")])
            r = get_ok(c.port, p, headers=[("Authorization", "Basic eDp5")])
            expect(is_hit(r), "public + Authorization: not a hit (%r)"
                   % r.header("Cache-Status"))
        with col.case("Authorization with s-maxage (control)"):
            p = "/aus/bytes/100/headers?Cache-Control=s-maxage%3D60"
            get_ok(c.port, p, headers=[("Authorization", "Basic eDp5")])
            r = get_ok(c.port, p, headers=[("Authorization", "Basic eDp5")])
            expect(is_hit(r), "s-maxage + Authorization: not a hit (%r)"
                   % r.header("Cache-Status"))


def test_stored_statuses():
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                workers=1) as c, Collector() as col:
        for st in (200, 203, 204, 300, 301, 404, 410):
            with col.case("status %d" % st):
                extra = ("&Location=http%3A%2F%2Fc.test%2Felsewhere"
                         if st == 301 else "")
                n = 0 if st == 204 else 3000 + st
                p = "/seed/st%d/status/%d/bytes/%d/%s%s" % (st, st, n, CC60,
                                                            extra)
                r1 = get_ok(c.port, p)
                expect_eq(r1.status, st, "first status")
                r2 = get_ok(c.port, p)
                expect_eq(r2.status, st, "second status")
                expect(is_hit(r2), "not a hit: Cache-Status %r"
                       % r2.header("Cache-Status"))
                expect_body(r2.body, r1.body, "hit body")
                expect_body(r2.body, b"" if st == 204 else
                          seeded("st%d" % st, n), "body")
                if st == 301:
                    expect_eq(r2.header("Location"), r1.header("Location"),
                              "Location on the hit")
                expect_eq(len(origin_hits(o, p)), 1, "origin requests")


def test_freshness_sources():
    """Expires-based, s-maxage over max-age, and the Last-Modified
    heuristic allowed by required_headers 1 (the default)."""
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                workers=1) as c, Collector() as col:
        with col.case("Expires one hour ahead"):
            exp = formatdate(time.time() + 3600, usegmt=True)
            p = "/seed/ex/bytes/7000/headers?Expires=" + urllib.parse.quote(
                exp)
            get_ok(c.port, p)
            r = get_ok(c.port, p)
            expect(is_hit(r), "not a hit: %r" % r.header("Cache-Status"))
            m = re.search(r"ttl=(\d+)", r.header("Cache-Status"))
            expect(m and 3590 <= int(m.group(1)) <= 3600,
                   "ttl from Expires: %r" % r.header("Cache-Status"))
            expect_body(r.body, seeded("ex", 7000), "body")
        with col.case("s-maxage wins over max-age"):
            p = ("/seed/sm/bytes/10/headers?Cache-Control=max-age%3D5%2C"
                 "%20s-maxage%3D500")
            get_ok(c.port, p)
            r = get_ok(c.port, p)
            m = re.search(r"ttl=(\d+)", r.header("Cache-Status", ""))
            expect(is_hit(r) and m and int(m.group(1)) > 400,
                   "s-maxage 500: Cache-Status %r" % r.header("Cache-Status"))
        with col.case("max-age wins over Expires"):
            exp = formatdate(time.time() + 3600, usegmt=True)
            p = ("/seed/me/bytes/10/headers?Cache-Control=max-age%3D100&"
                 "Expires=" + urllib.parse.quote(exp))
            get_ok(c.port, p)
            r = get_ok(c.port, p)
            m = re.search(r"ttl=(\d+)", r.header("Cache-Status", ""))
            expect(is_hit(r) and m and 90 <= int(m.group(1)) <= 100,
                   "max-age 100: Cache-Status %r" % r.header("Cache-Status"))
        with col.case("heuristic from Last-Modified (required_headers 1)"):
            p = "/seed/lm/bytes/10/last-modified/%d" % (time.time() - 86400)
            get_ok(c.port, p)
            r = get_ok(c.port, p)
            expect(is_hit(r), "Last-Modified a day ago: not a hit (%r)"
                   % r.header("Cache-Status"))
        expect_eq(len(o.requests()), 4, "origin requests")


def test_chunked_stored_with_length():
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                workers=1) as c:
        for n in (0, 1, 16384, 16385, 100000, 3000000):
            p = seeded_path("ch%d" % n, n, chunked=True)
            r1 = get_ok(c.port, p)
            expect(r1.chunked, "origin response was not chunked")
            expect_body(r1.body, seeded("ch%d" % n, n), "first body (%d)" % n)
            r2 = get_ok(c.port, p)
            expect(is_hit(r2), "chunked %d: not a hit (%r)"
                   % (n, r2.header("Cache-Status")))
            expect_eq(r2.header("Content-Length"), str(n),
                      "hit Content-Length (%d)" % n)
            expect(r2.header("Transfer-Encoding") is None,
                   "hit carries Transfer-Encoding")
            expect_body(r2.body, seeded("ch%d" % n, n), "hit body (%d)" % n)
            expect_eq(len(origin_hits(o, p)), 1, "origin requests (%d)" % n)


def test_over_max_doc_size_never_stored():
    with Origin() as o, Cistern(
            storage=["cache 16M"], remap=remap_for(o), workers=1,
            records={"proxy.config.cache.max_doc_size": 100000}) as c, \
            Collector() as col:
        cases = [("under the limit (control)", 99000, False, True),
                 ("length over max_doc_size", 100001, False, False),
                 ("chunked over max_doc_size", 250000, True, False),
                 ("chunked under the limit (control)", 90000, True, True)]
        for name, n, chunked, stored in cases:
            with col.case(name):
                p = seeded_path("md%d" % n, n, chunked=chunked)
                for i in range(2):
                    r = get_ok(c.port, p)
                    expect_body(r.body, seeded("md%d" % n, n), "body %d" % i)
                expect_eq(is_hit(r), stored, "second is a hit")
                expect_eq(len(origin_hits(o, p)), 1 if stored else 2,
                          "origin requests")
    # An object larger than a segment (16M store: 14 segments of 1 MiB)
    # with no max_doc_size of ours: it spans segments and is a hit; one over
    # a quarter of the store (the default max_doc_size 0) is refused.
    with Origin() as o, Cistern(storage=["cache 16M"], remap=remap_for(o),
                                workers=1) as c:
        for chunked in (False, True):
            for n, stored in ((1500000, True), (3700000, False)):
                p = seeded_path("seg%d-%d" % (chunked, n), n, chunked=chunked)
                for i in range(2):
                    r = get_ok(c.port, p)
                    expect_body(r.body, seeded("seg%d-%d" % (chunked, n), n),
                                "%d bytes: body %d" % (n, i))
                expect_eq(is_hit(r), stored, "%d bytes (chunked %d) a hit"
                          % (n, chunked))
                expect_eq(len(origin_hits(o, p)), 1 if stored else 2,
                          "origin requests")


def test_failed_fill_never_visible():
    """The origin dies mid-body: the partial object must never be served;
    the next request goes to the origin, gets the full body, and that one
    is stored."""
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                workers=1) as c, Collector() as col:
        n = 200000
        body = seeded("ff", n)
        head = ("HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n"
                "Content-Length: %d\r\n\r\n" % n).encode()
        chead = (b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")

        def chunks(b):
            return b"".join(b"%x\r\n%s\r\n" % (len(b[i:i + 8192]),
                                              b[i:i + 8192])
                            for i in range(0, len(b), 8192))
        full = {"status": 200, "headers": [["Cache-Control", "max-age=60"]],
                "body": body}
        bad = {
            "length, closed mid-body": head + body[:n // 2],
            "length, reset mid-body": head + body[:n // 2],
            "chunked, closed mid-chunk": chead + chunks(body)[:n // 2],
            "chunked, no last chunk": chead + chunks(body),
            "chunked, bad chunk size": chead + chunks(body[:50000])
            + b"zz\r\n" + body[50000:60000] + b"\r\n0\r\n\r\n",
        }
        for i, (name, rawb) in enumerate(bad.items()):
            with col.case(name):
                p = "/ff%d" % i
                first = {"raw": rawb}
                if "reset" in name:
                    first["reset_after_ms"] = 50
                o.script(p, [first, full])
                r1 = fetch(c.port, p)
                expect(r1 is None or r1.body != body,
                       "the broken response came through whole?")
                r2 = get_ok(c.port, p)
                expect(not is_hit(r2), "the partial object was served as a "
                       "hit: %r" % r2.header("Cache-Status"))
                expect_body(r2.body, body, "second body (from the origin)")
                r3 = get_ok(c.port, p)
                expect(is_hit(r3), "the full object was not stored: %r"
                       % r3.header("Cache-Status"))
                expect_body(r3.body, body, "third body")
                expect_eq(len(origin_hits(o, p)), 2, "origin requests")
        # The /close-mid-body directive as well.
        with col.case("close-mid-body directive"):
            p = "/seed/cm/close-mid-body/100000/" + CC60
            for _ in range(2):
                r = fetch(c.port, p)
                expect(r is None, "a truncated body came back complete")
            expect_eq(len(origin_hits(o, p)), 2,
                      "origin requests (the partial was cached?)")


def test_shared_across_workers():
    with Origin() as o, Cistern(
            storage=["cache 64M"], remap=remap_for(o), workers=2,
            records={"proxy.config.cistern.debug_headers": 1}) as c:
        wids = {}
        paths = [seeded_path("sh%d" % i, 1000 + 777 * i) for i in range(8)]
        for i, p in enumerate(paths):
            r = get_ok(c.port, p)
            expect(r.header("X-Cistern-Worker") is not None,
                   "no X-Cistern-Worker header with debug_headers 1")
        for attempt in range(600):
            i = attempt % len(paths)
            r = get_ok(c.port, paths[i])
            expect(is_hit(r), "%s: not a hit (%r), worker %r" % (
                paths[i], r.header("Cache-Status"),
                r.header("X-Cistern-Worker")))
            expect_body(r.body, seeded("sh%d" % i, 1000 + 777 * i), "body")
            w = r.header("X-Cistern-Worker").split(";")[0].strip()
            wids.setdefault(w, set()).add(i)
            if len(wids) >= 2 and all(len(v) == len(paths)
                                      for v in wids.values()):
                break
        expect(len(wids) >= 2, "only worker(s) %s ever answered" % list(wids))
        for w, s in wids.items():
            expect_eq(len(s), len(paths), "objects served as hits by "
                      "worker %s" % w)
        expect_eq(len(o.requests()), len(paths), "origin requests")


def _fill(c, objs):
    for name, n, chunked in objs:
        r = get_ok(c.port, seeded_path(name, n, chunked=chunked))
        expect_body(r.body, seeded(name, n), "fill body of %s" % name)


def test_restart_same_objects_hit():
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                workers=2) as c:
        rnd = random.Random(5)
        objs = [("rs%d" % i, rnd.choice([0, 1, 100, 5000, 70000, 1 << 20,
                                         3000000]), i % 3 == 0)
                for i in range(30)]
        _fill(c, objs)
        nreq = len(o.requests())
        c.restart()
        for name, n, chunked in objs:
            r = get_ok(c.port, seeded_path(name, n, chunked=chunked))
            expect(is_hit(r), "%s after restart: %r" % (
                name, r.header("Cache-Status")))
            expect_body(r.body, seeded(name, n), "body of %s" % name)
        expect_eq(len(o.requests()), nreq, "origin requests after restart")
        # and the write head survived: new fills do not clobber old objects
        more = [("rs2-%d" % i, 200000, False) for i in range(20)]
        _fill(c, more)
        for name, n, chunked in objs + more:
            r = get_ok(c.port, seeded_path(name, n, chunked=chunked))
            expect(is_hit(r), "%s after new fills: %r" % (
                name, r.header("Cache-Status")))
            expect_body(r.body, seeded(name, n), "body of %s" % name)


def _hammer(c, objs, stop, errors, done):
    rnd = random.Random(threading.get_ident())
    while not stop.is_set():
        name, n, chunked = rnd.choice(objs)
        try:
            r = fetch(c.port, seeded_path(name, n, chunked=chunked),
                      timeout=5)
        except OSError:
            continue
        if r is not None and r.status == 200:
            if r.body != seeded(name, n):
                errors.append("%s: wrong body during fills" % name)
            done.append((name, time.monotonic()))


@harness.timeout(110)
def test_kill9_during_fills():
    # 256M: room for every object (about 110 MB in all), so a forgotten
    # object cannot be an eviction.
    with Origin() as o, Cistern(storage=["cache 256M"], remap=remap_for(o),
                                workers=4) as c:
        c.expect_log(r"unclean|not cleanly|verif")
        rnd = random.Random(9)
        objs = [("k%d" % i, rnd.choice([10, 3000, 40000, 300000, 1500000]),
                 rnd.random() < 0.3) for i in range(300)]
        stop, errors, done = threading.Event(), [], []
        ts = [threading.Thread(target=_hammer,
                               args=(c, objs, stop, errors, done))
              for _ in range(16)]
        for t in ts:
            t.start()
        harness.wait_for(lambda: len(done) > 150, 30,
                         what="150 responses during the fills")
        time.sleep(1.5)
        time.sleep(0.3)   # let some fills be mid-body
        t_kill = time.monotonic()
        c.kill()          # SIGKILL to the whole process group
        stop.set()
        for t in ts:
            t.join(10)
        expect(not errors, "; ".join(errors[:5]))
        old = {name for name, t in done if t < t_kill - 1.0}
        c.start()
        hits = 0
        hit_names = set()
        for name, n, chunked in objs:
            r = get_ok(c.port, seeded_path(name, n, chunked=chunked))
            if is_hit(r):
                hits += 1
                hit_names.add(name)
            expect_body(r.body, seeded(name, n), "body of %s after kill -9 "
                      "(%s)" % (name, r.header("Cache-Status")))
        # Twice: the first pass refilled what was forgotten.
        for name, n, chunked in objs:
            r = get_ok(c.port, seeded_path(name, n, chunked=chunked))
            expect_body(r.body, seeded(name, n), "body of %s, second pass"
                      % name)
        expect(hits > 0, "nothing survived kill -9 (every committed "
               "object was forgotten)")
        print("    kill -9: %d of %d objects were hits after the restart; "
              "%d had been served whole more than 1 s before the kill"
              % (hits, len(objs), len(old)))
        # A process crash loses nothing committed (FORMAT.md): an object
        # whose whole response left the proxy well before the kill was
        # committed, so it must have been a hit in the first pass.
        lost = sorted(old - hit_names)
        expect(not lost, "%d of %d objects served whole more than 1 s "
               "before kill -9 were forgotten, e.g. %s" % (
                   len(lost), len(old), lost[:5]))


def stop_keep(c):
    """SIGTERM and wait, keeping the temp dir (Cistern.stop() removes it
    when all is well); fail on teardown problems."""
    c.stop(raise_on_problems=False)
    if c.problems:
        c._failed = True
        harness.fail("stop: " + "; ".join(c.problems))


def _find_records(content, names):
    """{name: offset of the record's key in the content file}."""
    out = {}
    for name in names:
        k = content.find(("/seed/%s/" % name).encode())
        if k >= 0:
            out[name] = k
    return out


def _corrupt_case(mutate, what):
    """Fill a 16M store, stop cleanly, damage the content file with
    mutate(path, names) -> {damaged name: how}, start again: every object
    must come back with exactly its bytes (a hit, or refetched), a damaged
    one never as a hit, the undamaged ones still hits."""
    with Origin() as o, Cistern(storage=["cache 16M"], remap=remap_for(o),
                                workers=2) as c:
        c.expect_log(r"damag|corrupt|truncat|checksum|invalid|re-?extend")
        objs = [("cx%d" % i, 450000 + 1000 * i, i % 4 == 3)
                for i in range(26)]
        _fill(c, objs)
        stop_keep(c)
        path = os.path.join(c.confdir, "cache", "content")
        expect(os.path.exists(path), "no content file at %s" % path)
        damaged = mutate(path, [x[0] for x in objs])
        expect(damaged, "the mutation damaged no object (test setup)")
        nreq = len(o.requests())
        log0 = c.log_size()
        c.start()
        hits, refetched, problems = [], [], []
        for name, n, chunked in objs:
            p = seeded_path(name, n, chunked=chunked)
            r = get_ok(c.port, p)
            hit = is_hit(r)
            (hits if hit else refetched).append(name)
            how = damaged.get(name, "undamaged")
            if r.body != seeded(name, n):
                problems.append("%s (%s): wrong bytes served as %s" % (
                    name, how, "a HIT" if hit else "a miss"))
            elif hit and name in damaged:
                problems.append("%s (%s): served as a hit" % (name, how))
        expect(not problems, "%s: %d object(s) wrong:\n      %s" % (
            what, len(problems), "\n      ".join(problems)))
        expect(hits, "%s: no object survived" % what)
        expect_eq(len(o.requests()) - nreq, len(refetched),
                  "origin requests after the restart")
        with open(os.path.join(c.log_dir, "error.log"), "rb") as f:
            f.seek(log0)
            tail = f.read().decode("utf-8", "replace")
        logged = [ln for ln in tail.splitlines()
                  if re.search(r"\[(warn|error|crit)\]", ln)]
        print("    %s: %d hits, %d refetched; damaged: %s; %d warn/error "
              "log lines after the restart%s" % (
                  what, len(hits), len(refetched),
                  harness._short(", ".join("%s=%s" % kv
                                           for kv in damaged.items()), 160),
                  len(logged), (": " + logged[0][:200]) if logged else ""))


def test_corrupt_content_truncated():
    def mutate(path, names):
        with open(path, "rb") as f:
            data = f.read()
        locs = _find_records(data, names)
        half = len(data) // 2
        os.truncate(path, half)
        return {n: "past the cut" for n, k in locs.items()
                if k + 1000 >= half}
    _corrupt_case(mutate, "truncated to half")


def test_corrupt_content_scribbled():
    def mutate(path, names):
        with open(path, "rb") as f:
            data = f.read()
        locs = _find_records(data, names)
        order = sorted(locs, key=locs.get)
        rnd = random.Random(42)
        damaged = {}
        with open(path, "r+b") as f:
            # (1) 4 KiB of noise in the middle of one body (headers intact)
            a = order[2]
            f.seek(locs[a] + 200000)
            f.write(rnd.randbytes(4096))
            damaged[a] = "4 KiB noise mid-body"
            # (2) one flipped byte in another body
            b = order[5]
            f.seek(locs[b] + 300000)
            f.write(bytes([data[locs[b] + 300000] ^ 0x01]))
            damaged[b] = "1 bit flipped mid-body"
            # (3) noise over a record header and key
            h = order[8]
            f.seek(locs[h] - 64)
            f.write(rnd.randbytes(200))
            damaged[h] = "noise over the record header"
            # (4) one flipped byte in the stored response headers
            k = order[10]
            hb = data.find(b"Content-Type", locs[k])
            f.seek(hb)
            f.write(b"X")
            damaged[k] = "1 byte of the header block"
            # (5) a random 64 KiB region across the tail of one object and
            # the start of the next
            d, e = order[12], order[13]
            f.seek(locs[e] - 32768)
            f.write(rnd.randbytes(65536))
            damaged[d] = "64 KiB noise over its tail"
            damaged[e] = "64 KiB noise over its head"
        return damaged
    _corrupt_case(mutate, "scribbled")


def test_eviction_small_store():
    with Origin() as o, Cistern(storage=["cache 16M"], remap=remap_for(o),
                                workers=2) as c:
        objs = [("ev%d" % i, 600000 + i, False) for i in range(60)]
        s0 = cache_stats(c.port)
        _fill(c, objs)
        # Lapped entries are counted when the cache manager sweeps them
        # (each second) or a lookup finds them: allow a few ticks.
        try:
            s1 = harness.wait_for(
                lambda: (lambda s: s if s["proxy.process.cache.evictions"]
                         > s0["proxy.process.cache.evictions"] else None)(
                             cache_stats(c.port)), 5.0,
                what="proxy.process.cache.evictions to grow")
        except AssertionError:
            s1 = cache_stats(c.port)
            harness.fail("evictions did not grow within 5 s of 36 MB of "
                         "fills into a 16M store: %r -> %r" % (
                             s0["proxy.process.cache.evictions"],
                             s1["proxy.process.cache.evictions"]))
        expect(s1["proxy.process.cache.bytes_used"]
               <= s1["proxy.process.cache.bytes_total"],
               "bytes_used %d > bytes_total %d" % (
                   s1["proxy.process.cache.bytes_used"],
                   s1["proxy.process.cache.bytes_total"]))
        expect_eq(s1["proxy.process.cache.fills"]
                  - s0["proxy.process.cache.fills"], len(objs), "fills")
        # the newest few are hits, the oldest are misses again
        for name, n, ch in objs[-5:]:
            r = get_ok(c.port, seeded_path(name, n))
            expect(is_hit(r), "recent %s: %r" % (name,
                                                 r.header("Cache-Status")))
            expect_body(r.body, seeded(name, n), "body of %s" % name)
        nreq = len(o.requests())
        for name, n, ch in objs[:5]:
            r = get_ok(c.port, seeded_path(name, n))
            expect(not is_hit(r), "old %s still a hit in a 16M store after "
                   "36 MB of fills" % name)
            expect_body(r.body, seeded(name, n), "body of %s" % name)
        expect_eq(len(o.requests()) - nreq, 5, "origin requests for the "
                  "evicted objects")
        # every object still comes back right, hit or not
        for name, n, ch in objs:
            r = get_ok(c.port, seeded_path(name, n))
            expect_body(r.body, seeded(name, n), "body of %s" % name)


def test_stats_counters():
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                workers=2) as c:
        s0 = cache_stats(c.port)
        sizes = [1000, 20000, 300000]
        for i, n in enumerate(sizes):          # 3 misses, 3 fills
            get_ok(c.port, seeded_path("st%d" % i, n))
        served = 0
        for k in range(5):                     # 5 hits
            i = k % 3
            r = get_ok(c.port, seeded_path("st%d" % i, sizes[i]))
            expect(is_hit(r), "expected a hit")
            served += sizes[i]
        get_ok(c.port, "/nostore/headers?Cache-Control=no-store")  # 1 miss
        s1 = cache_stats(c.port)

        def d(name):
            return s1[name] - s0[name]
        with Collector() as col:
            for name, want in (("proxy.process.cache.hits", 5),
                               ("proxy.process.cache.misses", 4),
                               ("proxy.process.cache.fills", 3),
                               ("proxy.process.cache.fill_failures", 0),
                               ("proxy.process.http.outgoing_requests", 4)):
                with col.case(name):
                    expect_eq(d(name), want, "delta of %s" % name)
            with col.case("bytes_served"):
                # body bytes of the hits, plus (as the daemon counts) their
                # header blocks: at most 1 KiB a hit
                got = d("proxy.process.cache.bytes_served")
                expect(served <= got <= served + 5 * 1024,
                       "bytes_served grew by %d; the 5 hits carried %d body "
                       "bytes" % (got, served))
            with col.case("bytes_used"):
                expect(d("proxy.process.cache.bytes_used") >= sum(sizes),
                       "bytes_used grew by %d, stored %d body bytes" % (
                           d("proxy.process.cache.bytes_used"), sum(sizes)))
            with col.case("fill failure counted"):
                o.script("/ffc", [{"raw": b"HTTP/1.1 200 OK\r\nCache-Control:"
                                   b" max-age=60\r\nContent-Length: 1000\r\n"
                                   b"\r\nabc"}])
                fetch(c.port, "/ffc")
                s2 = cache_stats(c.port)
                expect_eq(s2["proxy.process.cache.fill_failures"]
                          - s1["proxy.process.cache.fill_failures"], 1,
                          "fill_failures after a truncated fill")
                expect_eq(s2["proxy.process.cache.fills"]
                          - s1["proxy.process.cache.fills"], 0,
                          "fills after a truncated fill")


if __name__ == "__main__":
    harness.main()
